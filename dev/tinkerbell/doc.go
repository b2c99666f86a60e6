// Package tinkerbell runs Tinkerbell's own programs against the development stack's API server
// and waits on them, in the version the stack runs (Version; FLEETD_TINKERBELL): by default
// v0.25.0's `tinkerbell`, its controller and server only (StartTinkerbell), and a netbooting
// machine's tink-agent (StartAgent), or tink v0.12.2's tink-controller (StartController),
// tink-server (StartServer) and tink-worker (StartWorker) in make test-compat; Start starts the
// version's controller and server, RunWorker a worker with its container runtime (dev/dockerapi),
// as the stack's Netboot and `fleetsim workflow` do. The controller renders Template + Hardware
// into each Workflow's status and moves its state (WaitPrepared and WaitReconciled wait for it);
// the server is the workers' API (the lifecycle as v0.25's tink/controller and tink/server, and
// tink v0.12.2's internal/workflow/reconciler.go, internal/server/kubernetes_api_workflow.go and
// cmd/tink-worker/worker/worker.go implement it; docs/design.md §3, §8). Workflow reads both
// versions' objects. Nothing here writes a Workflow's status: Tinkerbell's programs do.
//
// It is for tests and the development stack only; the production fleetd binary must not link
// it.
package tinkerbell
