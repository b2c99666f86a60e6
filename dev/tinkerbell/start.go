package tinkerbell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Options configure Start.
type Options struct {
	Version Version
	// Root is the fleetd checkout, whose scripts/tools.sh has built the version's programs.
	Root       string
	Kubeconfig string
	// Namespace is the namespace whose Workflows the server serves (and, with v0.12.2, the only
	// one the controller watches: v0.25's watches every namespace).
	Namespace string
	// Dir receives the logs: tinkerbell.log (v0.25), or tink-controller.log and tink-server.log
	// (v0.12.2).
	Dir string
}

// Tinkerbell is a running Tinkerbell of one Version against an API server: its controller, which
// renders Templates into Workflows and moves their state, and its server, the API a netbooting
// machine's worker asks for work (RunWorker). v0.25 runs both in one `tinkerbell` process.
type Tinkerbell struct {
	Version Version
	// Addr is the server's plain gRPC address on loopback.
	Addr string
	// ControllerLog and ServerLog are the two programs' logs (one file with v0.25).
	ControllerLog, ServerLog string
	// Worker is the program a netbooting machine runs: tink-agent or tink-worker.
	Worker string
	procs  []*Process
}

// Start starts the version's controller and server (scripts/tools.sh built them; a missing one is
// an error saying to run `make tools`) and returns once the controller reconciles and the server
// listens.
func Start(ctx context.Context, o Options) (*Tinkerbell, error) {
	if o.Root == "" || o.Kubeconfig == "" || o.Namespace == "" || o.Dir == "" {
		return nil, errors.New("start Tinkerbell: Root, Kubeconfig, Namespace and Dir are required")
	}
	v := o.Version
	if v == "" {
		v = V025
	}
	bins := map[string]string{}
	for _, n := range v.Tools() {
		bin, err := Tool(o.Root, n)
		if err != nil {
			return nil, fmt.Errorf("start Tinkerbell %s: %w", v, err)
		}
		bins[n] = bin
	}
	t := &Tinkerbell{Version: v}
	if v == V025 {
		log := filepath.Join(o.Dir, "tinkerbell.log")
		srv, err := StartTinkerbell(ctx, TinkerbellOptions{Binary: bins["tinkerbell"], Kubeconfig: o.Kubeconfig, Namespace: o.Namespace, Log: log})
		if err != nil {
			return nil, err
		}
		t.Addr, t.ControllerLog, t.ServerLog, t.Worker, t.procs = srv.Addr, log, log, bins["tink-agent"], []*Process{srv.Process}
		return t, nil
	}
	t.ControllerLog, t.ServerLog, t.Worker = filepath.Join(o.Dir, "tink-controller.log"), filepath.Join(o.Dir, "tink-server.log"), bins["tink-worker"]
	ctrl, err := StartController(ctx, ControllerOptions{Binary: bins["tink-controller"], Kubeconfig: o.Kubeconfig, Namespace: o.Namespace, Log: t.ControllerLog})
	if err != nil {
		return nil, err
	}
	t.procs = append(t.procs, ctrl)
	srv, err := StartServer(ctx, ServerOptions{Binary: bins["tink-server"], Kubeconfig: o.Kubeconfig, Namespace: o.Namespace, Log: t.ServerLog})
	if err != nil {
		return nil, errors.Join(err, ctrl.Stop())
	}
	t.Addr, t.procs = srv.Addr, append(t.procs, srv.Process)
	return t, nil
}

// Stop ends the processes, the server first, and fails when any had to be killed.
func (t *Tinkerbell) Stop() error {
	var errs []error
	for i := len(t.procs) - 1; i >= 0; i-- {
		errs = append(errs, t.procs[i].Stop())
	}
	return errors.Join(errs...)
}

// QuaminaReached is the line interop/quamina writes to standard error (the process's log) each time
// a flow of Tinkerbell v0.25 calls it: the module proxy does not serve quamina.net/go/quamina,
// and the interop module that builds Tinkerbell replaces it with a module that refuses every
// pattern. fleetd's flows must never reach it (docs/design.md, "Development stack"): the
// development stack's tests count these lines (QuaminaCalls) and fail on any.
const QuaminaReached = "quamina replacement reached"

// QuaminaCalls counts the lines of the logs that say a flow reached the quamina replacement (a
// log that does not exist counts none: v0.12.2's programs do not write one).
func QuaminaCalls(logs ...string) (int, error) {
	n := 0
	seen := map[string]bool{}
	for _, l := range logs {
		if l == "" || seen[l] {
			continue
		}
		seen[l] = true
		b, err := os.ReadFile(l)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", l, err)
		}
		n += bytes.Count(b, []byte(QuaminaReached))
	}
	return n, nil
}
