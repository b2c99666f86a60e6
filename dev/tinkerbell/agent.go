package tinkerbell

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"time"
)

// TinkerbellOptions configure StartTinkerbell.
type TinkerbellOptions struct {
	Binary     string // tinkerbell (Tool(root, "tinkerbell"))
	Kubeconfig string
	Namespace  string // the namespace the server's backend serves Workflows and Hardware from
	Log        string
}

// The log lines that say v0.25's controller reconciles (controller-runtime's) and its server
// listens.
const (
	tinkerbellControllerReady = `"msg":"Starting workers"`
	tinkerbellServerReady     = `"msg":"starting gRPC server"`
)

// StartTinkerbell starts Tinkerbell v0.25's `tinkerbell` with its controller and server only,
// against the API server with its kube backend: smee, tootles, rufio, secondstar and the UI off,
// no CRD migrations (the API server has v0.25's CRDs installed already: Version.CRDDirs), its
// HTTP listener and the server's gRPC listener on free loopback ports, the controller's debug log
// on (WaitReconciled reads its reconcile journal). It returns once the controller reconciles and
// the server listens. Its leader election is off by default, and the binary is built without its
// embedded etcd, kube-apiserver and controller-manager (scripts/tools.sh).
//
// Unlike tink-controller v0.12.2, v0.25's controller watches every namespace: one API server
// should run one controller.
func StartTinkerbell(ctx context.Context, o TinkerbellOptions) (*Server, error) {
	if o.Binary == "" || o.Kubeconfig == "" || o.Namespace == "" || o.Log == "" {
		return nil, errors.New("start tinkerbell: Binary, Kubeconfig, Namespace and Log are required")
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, fmt.Errorf("start tinkerbell: %w", err)
	}
	args := []string{"--backend", "kube", "--backend-kube-config", o.Kubeconfig, "--backend-kube-namespace", o.Namespace,
		"--enable-smee=false", "--enable-tootles=false", "--enable-rufio-controller=false", "--enable-secondstar=false",
		"--enable-ui=false", "--enable-crd-migrations=false",
		"--bind-address", "127.0.0.1", "--http-port", strconv.Itoa(ports[0]), "--tink-server-bind-port", strconv.Itoa(ports[1]),
		"--tink-controller-log-level", "1"}
	p, err := startProcess(ctx, "tinkerbell", o.Binary, args, nil, o.Log, tinkerbellServerReady, tinkerbellControllerReady)
	if err != nil {
		return nil, err
	}
	return &Server{Process: p, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}, nil
}

// freePorts finds n free TCP ports on loopback by listening and closing, which leaves a small
// race with other processes.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// AgentOptions configure StartAgent.
type AgentOptions struct {
	Binary string // tink-agent (Tool(root, "tink-agent"))
	// ID is the agent id: the machine's MAC, as the Templates' worker: "{{.device_1}}".
	ID string
	// Server is the tink server's gRPC address.
	Server string
	// DockerSocket is the container runtime's socket (the unix socket of a dockerapi.Engine).
	DockerSocket string
	// RetryInterval caps the agent's backoff between its requests for work; default 200 ms.
	RetryInterval time.Duration
	Log           string
}

// StartAgent starts tink-agent v0.25 for one machine with its docker runtime on DockerSocket (it
// ignores DOCKER_HOST) and plain gRPC to the server, attribute detection off (it would read this
// host's hardware), and returns once its runtime is set up. It runs until Stop: the agent itself
// never ends.
func StartAgent(ctx context.Context, o AgentOptions) (*Process, error) {
	if o.Binary == "" || o.ID == "" || o.Server == "" || o.DockerSocket == "" || o.Log == "" {
		return nil, errors.New("start tink-agent: Binary, ID, Server, DockerSocket and Log are required")
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = 200 * time.Millisecond
	}
	return startProcess(ctx, "tink-agent", o.Binary, []string{"--id", o.ID, "--runtime", "docker", "--docker-socket", o.DockerSocket,
		"--transport", "grpc", "--grpc-server", o.Server, "--grpc-tls=false", "--attribute-detection=false",
		"--backoff-max-interval", o.RetryInterval.String()}, nil, o.Log, `"msg":"using Docker runtime"`)
}

// AgentContainerName is the name tink-agent v0.25 gives an action's container
// (tink/agent/internal/pkg/conv.ParseName): "tinkerbell_", the name, "_" and the action's id,
// each character Docker does not allow replaced by "_".
func AgentContainerName(action, id string) string {
	return "tinkerbell_" + invalidContainerChars.ReplaceAllString(action, "_") + "_" + invalidContainerChars.ReplaceAllString(id, "_")
}

// agentContainerID is the action id at the end of an agent's container name (an id is a ULID,
// which has no "_").
var agentContainerID = regexp.MustCompile(`_([^_]+)$`)
