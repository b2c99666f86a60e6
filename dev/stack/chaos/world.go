package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
)

// world is what surrounds fleetd in a schedule: the machines and Tinkerbell, reading the
// Kubernetes API and the emulator's store the way they would see them.
type world struct {
	s *stack.Stack
}

// terminal are the fleet_state values in which no request runs (fleet.State.Terminal, restated
// here so that the checker does not take fleetd's word for it).
var terminal = map[string]bool{"": true, "active": true, "wiped": true, "retired": true, "failed": true, "rejected": true, "untrusted": true,
	"unconfirmed": true}

// requestAction is the action a request id names ("provision-k3f9x2mq" → provision).
func requestAction(request string) string {
	a, _, _ := strings.Cut(request, "-")
	return a
}

// devState is what the world reads of a device, from the emulator's store.
type devState struct {
	state, request, workflow, desired, status string
}

func (w *world) device(name string) (devState, error) {
	id := w.s.DeviceID(name)
	cf, err := w.s.NetBox().CustomFieldData(id)
	if err != nil {
		return devState{}, err
	}
	str := func(k string) string { v, _ := cf[k].(string); return v }
	raw, err := w.s.NetBox().DeviceJSON(id)
	if err != nil {
		return devState{}, err
	}
	return devState{state: str("fleet_state"), request: str("fleet_request"), workflow: str("fleet_workflow"),
		desired: str("desired_action"), status: statusOf(raw)}, nil
}

// quiet reports whether nothing is running or asked for on the device: its state is terminal, no
// desired_action waits, and a decommissioning device was retired (or its retirement ended or
// was refused).
func (d devState) quiet() bool {
	if !terminal[d.state] || d.desired != "" {
		return false
	}
	if d.status == "decommissioning" {
		return d.state == "retired" || d.state == "rejected" || requestAction(d.request) == "retire"
	}
	return true
}

// openWorkflow is the Workflow the machine's worker runs next (stack.MachineWorkflow); an error
// wrapping stack.ErrNoWorkflow when none waits.
func (w *world) openWorkflow(ctx context.Context, name string) (*tinkerbell.Workflow, error) {
	return stack.MachineWorkflow(ctx, w.s.Kube(), w.s.Info().Namespace, w.s.Info().Machines[name])
}

// waitWorkflow waits up to d until a Workflow waits for the machine, or nothing is on its way
// (no request asked for or running), or the API server cannot be asked.
func (w *world) waitWorkflow(ctx context.Context, name string, d time.Duration) {
	waitFor(ctx, d, func() bool {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := w.openWorkflow(lctx, name); !errors.Is(err, stack.ErrNoWorkflow) {
			return true // a Workflow waits, or the API server cannot be asked
		}
		dev, err := w.device(name)
		return err != nil || dev.quiet()
	})
}

// logSize is the size of the machine's log now.
func (w *world) logSize(name string) int64 {
	fi, err := os.Stat(filepath.Join(w.s.Info().Machines[name].Dir, stack.MachineLog))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// waitEnrolling waits until the machine's log, past offset, says the agent's action is running,
// and reports whether it did before the netboot ended (a value in done).
func (w *world) waitEnrolling(ctx context.Context, name string, offset int64, done chan error) bool {
	path := filepath.Join(w.s.Info().Machines[name].Dir, stack.MachineLog)
	enrolling := false
	waitFor(ctx, time.Minute, func() bool {
		b, err := os.ReadFile(path)
		if err == nil && int64(len(b)) > offset {
			for _, l := range strings.Split(string(b[offset:]), "\n") {
				if strings.Contains(l, "action fleetd-enroll (") && strings.HasSuffix(l, "RUNNING") {
					enrolling = true
				}
			}
		}
		return enrolling || len(done) > 0
	})
	return enrolling
}

// statusOf reads the status value of a device's JSON ("" when unreadable).
func statusOf(raw []byte) string {
	var d struct {
		Status struct {
			Value string `json:"value"`
		} `json:"status"`
	}
	_ = json.Unmarshal(raw, &d)
	return d.Status.Value
}

// ErrNotAtRest is wrapped by Settle when a device did not come to rest in time.
var ErrNotAtRest = errors.New("not at rest")
