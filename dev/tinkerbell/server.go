package tinkerbell

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// ServerOptions configure StartServer.
type ServerOptions struct {
	Binary     string // tink-server (Tool(root, "tink-server"))
	Kubeconfig string
	Namespace  string // the namespace whose Workflows it serves
	Log        string
}

// Server is a running tink-server: the workers' gRPC API (plain, on loopback) over the
// Kubernetes API's Workflows.
type Server struct {
	*Process
	// Addr is the gRPC listener's host:port.
	Addr string
}

var listenerAddress = regexp.MustCompile(`"address":"([^"]+)"`)

// StartServer starts tink-server v0.12.2 with its Kubernetes backend on free loopback ports and
// returns once its gRPC listener is up.
func StartServer(ctx context.Context, o ServerOptions) (*Server, error) {
	if o.Binary == "" || o.Kubeconfig == "" || o.Namespace == "" || o.Log == "" {
		return nil, errors.New("start tink-server: Binary, Kubeconfig, Namespace and Log are required")
	}
	p, err := startProcess(ctx, "tink-server", o.Binary, []string{"--backend", "kubernetes", "--kubeconfig", o.Kubeconfig,
		"--kube-namespace", o.Namespace, "--grpc-authority", "127.0.0.1:0", "--http-authority", "127.0.0.1:0"},
		nil, o.Log, `"msg":"started listener"`)
	if err != nil {
		return nil, err
	}
	m := listenerAddress.FindStringSubmatch(p.ready)
	if m == nil {
		return nil, errors.Join(fmt.Errorf("tink-server logged no listener address: %s", p.ready), p.Stop())
	}
	return &Server{Process: p, Addr: m[1]}, nil
}

// WorkerOptions configure StartWorker.
type WorkerOptions struct {
	Binary string // tink-worker (Tool(root, "tink-worker"))
	// ID is the worker id: the machine's MAC, as the Templates' worker: "{{.device_1}}".
	ID string
	// Server is tink-server's gRPC address.
	Server string
	// DockerHost is the container runtime (dockerapi.Engine.Host()).
	DockerHost string
	// RetryInterval is how often the worker asks tink-server for work; default 200 ms.
	RetryInterval time.Duration
	Log           string
}

// StartWorker starts tink-worker v0.12.2 for one machine, with plain gRPC to the server and
// DOCKER_HOST the given runtime, and returns once it asks for work. It runs until Stop: the
// worker itself never ends.
func StartWorker(ctx context.Context, o WorkerOptions) (*Process, error) {
	if o.Binary == "" || o.ID == "" || o.Server == "" || o.DockerHost == "" || o.Log == "" {
		return nil, errors.New("start tink-worker: Binary, ID, Server, DockerHost and Log are required")
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = 200 * time.Millisecond
	}
	return startProcess(ctx, "tink-worker", o.Binary, []string{"--id", o.ID, "--tinkerbell-grpc-authority", o.Server,
		"--tinkerbell-tls=false", "--retry-interval", o.RetryInterval.String(), "--capture-action-logs=true"},
		[]string{"DOCKER_HOST=" + o.DockerHost}, o.Log, `"msg":"starting to process workflow actions"`)
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

var invalidContainerChars = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)

// ContainerName is the name tink-worker v0.12.2 gives an action's container
// (cmd/tink-worker/worker makeValidContainerName): "action_" and the name, each character
// Docker does not allow replaced by "_".
func ContainerName(action string) string {
	return "action_" + invalidContainerChars.ReplaceAllString(action, "_")
}

// WorkflowBind is the bind tink-worker v0.12.2 gives every action's container of a Workflow, its
// shared directory (cmd/tink-worker/worker CreateContainer: /worker/<namespace>/<name> at
// /workflow): it says which Workflow a container belongs to.
func WorkflowBind(wf *Workflow) string {
	return "/worker/" + wf.Namespace + "/" + wf.Name + ":/workflow"
}
