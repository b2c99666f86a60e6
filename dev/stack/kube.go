package stack

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/kubeharness"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
	exampletemplates "github.com/folly-infra/fleetd/examples/tinkerbell"
)

// startKube starts the API server on port (0: a free one, remembered for restarts) with its
// data under the state directory, writes the kubeconfig, and builds the stack's client once.
func (s *Stack) startKube(ctx context.Context, port int) error {
	crds, err := s.opts.Tinkerbell.CRDDirs(ctx, s.opts.Root)
	if err != nil {
		return err
	}
	srv, err := kubeharness.Start(ctx, kubeharness.Options{Dir: s.paths.kube, Port: port, CRDDir: crds[0], MoreCRDDirs: crds[1:]})
	if err != nil {
		return fmt.Errorf("start the Kubernetes API server: %w", err)
	}
	u, err := url.Parse(srv.URL())
	if err != nil {
		return errors.Join(fmt.Errorf("start the Kubernetes API server: its URL %q: %w", srv.URL(), err), srv.Stop())
	}
	if s.kubePort, err = strconv.Atoi(u.Port()); err != nil {
		return errors.Join(fmt.Errorf("start the Kubernetes API server: its URL %q has no port", srv.URL()), srv.Stop())
	}
	if err := srv.WriteKubeconfig(s.paths.kubeconfig); err != nil {
		return errors.Join(fmt.Errorf("write the kubeconfig: %w", err), srv.Stop())
	}
	s.kubeMu.Lock()
	s.kube = srv
	s.kubeMu.Unlock()
	if s.kc == nil {
		if s.kc, err = KubeClient(s.paths.kubeconfig); err != nil {
			return err
		}
	}
	return nil
}

// startController starts the stack's Tinkerbell (Options.Tinkerbell; scripts/tools.sh builds its
// programs) against the stack's API server, for the stack's namespace: the controller renders
// and moves every Workflow, the server is the API a machine's worker asks for work while the
// machine netboots (Netboot). Their logs are in the state directory: tinkerbell.log (v0.25), or
// tink-controller.log and tink-server.log (v0.12.2).
func (s *Stack) startController(ctx context.Context) error {
	tb, err := tinkerbell.Start(ctx, tinkerbell.Options{Version: s.opts.Tinkerbell, Root: s.opts.Root,
		Kubeconfig: s.paths.kubeconfig, Namespace: s.opts.Namespace, Dir: s.paths.dir})
	if err != nil {
		return fmt.Errorf("start Tinkerbell: %w", err)
	}
	s.tb = tb
	s.tink = TinkerbellInfo{Version: string(tb.Version), Server: tb.Addr, ServerLog: tb.ServerLog,
		ControllerLog: tb.ControllerLog, Worker: tb.Worker}
	return nil
}

// installTemplates installs the example Templates (examples/tinkerbell) into the namespace.
func (s *Stack) installTemplates(ctx context.Context) error {
	if err := tinkerbell.InstallTemplates(ctx, s.kc, s.opts.Namespace, exampletemplates.FS); err != nil {
		return fmt.Errorf("install the example Templates: %w", err)
	}
	return nil
}

// StopKube stops the API server (Kubernetes unreachable for fleetd); its data stays for
// StartKube. It is a no-op when the server is stopped.
func (s *Stack) StopKube() error {
	s.kubeMu.Lock()
	srv := s.kube
	s.kube = nil
	s.kubeMu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Stop()
}

// StartKube starts the API server again on the same data directory and port, so fleetd's
// kubeconfig and the stack's client keep working. It returns once the server is ready.
func (s *Stack) StartKube(ctx context.Context) error {
	s.kubeMu.Lock()
	running := s.kube != nil
	s.kubeMu.Unlock()
	if running {
		return nil
	}
	return s.startKube(ctx, s.kubePort)
}

func (s *Stack) kubeURL() string {
	s.kubeMu.Lock()
	defer s.kubeMu.Unlock()
	if s.kube == nil {
		return ""
	}
	return s.kube.URL()
}

// KubeClient builds a Kubernetes client with the stack's Tinkerbell types (tinkerbell.Scheme:
// Workflows of either version) from a kubeconfig (stack.json's).
// Its rate limit (100 requests/s, bursts of 200) is above client-go's default of 5/s, which
// would make a test that creates hundreds of objects wait on the client.
func KubeClient(kubeconfig string) (client.WithWatch, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	rc.QPS, rc.Burst = 100, 200
	scheme, err := tinkerbell.Scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(rc, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("build Kubernetes client for %s: %w", rc.Host, err)
	}
	return c, nil
}
