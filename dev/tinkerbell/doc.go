// Package tinkerbell runs Tinkerbell v0.12.2's own programs against the development stack's API
// server and waits on them: tink-controller (StartController: it renders Template + Hardware
// into each Workflow's status and moves its state; WaitPrepared and WaitReconciled wait for it),
// tink-server (StartServer, the workers' API) and a netbooting machine's tink-worker
// (StartWorker, or RunWorker with its container runtime, dev/dockerapi), as the stack's Netboot
// and `fleetsim workflow` do (the lifecycle as tink v0.12.2's internal/workflow/reconciler.go,
// internal/server/kubernetes_api_workflow.go and cmd/tink-worker/worker/worker.go implement it;
// docs/design.md §3, §8). Nothing here writes a Workflow's status: tink-controller and
// tink-server do.
//
// It is for tests and the development stack only; the production fleetd binary must not link
// it.
package tinkerbell
