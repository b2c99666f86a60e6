package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/klog/v2"

	"github.com/folly-infra/fleetd/dev/kubecluster"
	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
)

// up starts the stack, prints where everything listens, and runs until SIGINT or SIGTERM.
func up(ctx context.Context, dir string, args []string, stdout, stderr io.Writer) int {
	s, code := startStack(ctx, "up", dir, args, stdout, stderr)
	if s == nil {
		return code
	}
	stack.PrintInfo(stdout, s.Info())
	fmt.Fprintf(stdout, "The Kubernetes API server logs to %s.\n", filepath.Join(dir, "kube.log"))
	<-ctx.Done()
	return stopStack(s, "up", stdout, stderr)
}

// demo starts a fresh stack, walks the example inventory through its lifecycle (stack.Demo)
// and stops the stack; it exits 0 only if every step did what it should.
func demo(ctx context.Context, dir string, args []string, stdout, stderr io.Writer) int {
	s, code := startStack(ctx, "demo", dir, args, stdout, stderr)
	if s == nil {
		return code
	}
	err := stack.Demo(ctx, s.Info(), stdout)
	if code := stopStack(s, "demo", stdout, stderr); err == nil && code != 0 {
		return code
	}
	if err != nil {
		fmt.Fprintln(stderr, "fleetsim demo:", err)
		return 1
	}
	return 0
}

// startStack parses the stack's flags and starts it in dir; a nil stack comes with the exit code.
func startStack(ctx context.Context, cmd, dir string, args []string, stdout, stderr io.Writer) (*stack.Stack, int) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	extra := fs.Int("extra-devices", 0, "add N generated, validly declared talos-worker devices with simulated machines")
	fleetdBin := fs.String("fleetd", "", "the fleetd binary (default: fleetd next to this executable)")
	root := fs.String("root", "", "the fleetd checkout (default: the module root above the working directory)")
	interval := fs.Duration("reconcile-interval", 30*time.Second, "fleetd's periodic reconcile interval (at least 5s)")
	level := fs.String("log-level", "info", "fleetd's log level (debug, info, warn, error)")
	latency := fs.Duration("netbox-latency", 0, "added to every NetBox emulator answer, e.g. 25ms (a real NetBox's pace)")
	instances := fs.Int("fleetd-instances", 1, "run N fleetd processes behind a round-robin TCP front on fleetd's URLs (it keeps each client's source address)")
	lifetime := fs.Duration("cert-lifetime", 2160*time.Hour, "the LDevID and LAK lifetime (boot checks renew from half of it), e.g. 4m for renewal tests; at least 1m")
	workloadCluster := fs.Bool("workload-cluster", false, "run a workload cluster (kube-apiserver and kube-controller-manager "+kubecluster.Version+" asking fleetd's authorization webhook) that the Talos machines' kubelets join at their first boot; their devices go active once their Node is Ready")
	joinDeadline := fs.Duration("join-deadline", 0, "with --workload-cluster: fleetd's cluster.join_deadline (at least 1m; default fleetd's, 30m)")
	tink := fs.String("tinkerbell", os.Getenv(tinkerbell.VersionEnv), "the Tinkerbell the stack runs: v0.25.0 (the default) or v0.12.2 (build its programs first: scripts/tools.sh build tink-controller ...); default $"+tinkerbell.VersionEnv)
	if err := fs.Parse(args); err != nil {
		return nil, 2
	}
	version, err := tinkerbell.ParseVersion(*tink)
	if err != nil {
		fmt.Fprintf(stderr, "fleetsim %s: --tinkerbell: %v\n", cmd, err)
		return nil, 2
	}
	if fs.NArg() > 0 || *extra < 0 || *latency < 0 || *lifetime < time.Minute || *instances < 1 {
		fmt.Fprintf(stderr, "fleetsim %s: takes only flags, --extra-devices and --netbox-latency must not be negative, --cert-lifetime is at least 1m, and --fleetd-instances at least 1\n", cmd)
		return nil, 2
	}
	bin, err := fleetdBinary(*fleetdBin)
	if err != nil {
		fmt.Fprintf(stderr, "fleetsim %s: %v\n", cmd, err)
		return nil, 1
	}
	// The API server logs through klog (process-wide); its lines go to a file in the state
	// directory, errors also to stderr.
	klog.LogToStderr(false)
	klog.SetOutput(&lazyFile{path: filepath.Join(dir, "kube.log")})
	log := zerolog.New(zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly}).Level(zerolog.InfoLevel).
		With().Timestamp().Str("component", "fleetsim").Logger()
	fmt.Fprintf(stdout, "fleetsim: starting the stack in %s (NetBox emulator, Kubernetes API, Tinkerbell %s, %d machines' TPMs, fleetd)...\n",
		dir, version, len(stack.SeedDevices(*extra)))
	s, err := stack.Start(ctx, stack.Options{Dir: dir, Root: *root, FleetdBinary: bin, ExtraDevices: *extra, Tinkerbell: version,
		ReconcileInterval: *interval, LogLevel: *level, NetBoxLatency: *latency, CertLifetime: *lifetime, FleetdInstances: *instances,
		WorkloadCluster: *workloadCluster, JoinDeadline: *joinDeadline, Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "fleetsim %s: %v\n", cmd, err)
		return nil, 1
	}
	return s, 0
}

func stopStack(s *stack.Stack, cmd string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stdout, "fleetsim: stopping fleetd, Tinkerbell, the Kubernetes API and the NetBox emulator...")
	if err := s.Close(); err != nil {
		fmt.Fprintf(stderr, "fleetsim %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// fleetdBinary is the named binary, or fleetd next to this executable (bin/ after make build).
func fleetdBinary(named string) (string, error) {
	if named != "" {
		return named, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find fleetd next to fleetsim: %w; name it with --fleetd", err)
	}
	p := filepath.Join(filepath.Dir(self), "fleetd")
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("no fleetd next to fleetsim (%s): run `make build`, or name it with --fleetd", p)
	}
	return p, nil
}

// lazyFile appends to a file it opens on the first write: the state directory is emptied when
// the stack starts, before the API server logs anything.
type lazyFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

func (l *lazyFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return 0, err
		}
		l.f = f
	}
	return l.f.Write(p)
}
