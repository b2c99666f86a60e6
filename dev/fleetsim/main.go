// Command fleetsim runs fleetd's development stack (docs/design.md §8) and drives it:
//
//	fleetsim up [--extra-devices N] [--fleetd-instances N]  the stack, in the foreground
//	           [--tinkerbell v0.25.0|v0.12.2]               (Tinkerbell v0.25.0's programs by default)
//	fleetsim restart fleetd [--instance K]                  restart fleetd as a reboot of spore would
//	fleetsim workflow NAME succeed|fail [--action A] ...    run a device's Workflow: a real worker, scripted containers
//	fleetsim machine NAME netboot|boot|boot-check           drive a simulated machine
//	fleetsim machine NAME swap-disk|add-disk|set-mac|set-uuid|replace-tpm
//	                                                        change its hardware (NetBox keeps its declaration)
//	fleetsim demo                                           make demo: the lifecycle of every class kind
//
// The state directory is $FLEETSIM_DIR (default .fleetsim in the working directory); the
// commands other than up read its stack.json. It is development code, built apart from the
// production binary.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// version is stamped at build time (-X main.version=...).
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: fleetsim <command> [flags]

commands:
  up [--extra-devices N] [--fleetd-instances N] [--tinkerbell v0.25.0|v0.12.2]
                                          start the development stack in the foreground
  restart fleetd [--instance K]           restart fleetd (every instance, or the K-th) the way a reboot of spore would
  workflow NAME succeed|fail [flags]      run device NAME's Workflow without its machine: Tinkerbell's server, a real worker, scripted containers
  machine NAME netboot|boot|boot-check    drive the simulated machine of device NAME
  machine NAME swap-disk|add-disk|set-mac|set-uuid|replace-tpm
                                          change its hardware (a disk, its MAC, its mainboard, its TPM); NetBox keeps its declaration
  demo                                    start a fresh stack, walk every class kind through its lifecycle, stop
  version                                 print the version

The state directory is $FLEETSIM_DIR (default .fleetsim in the working directory).
Run "fleetsim <command> -h" for a command's flags.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctrllog.SetLogger(klog.Background()) // controller-runtime's clients log through klog
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := stateDir()
	if err != nil {
		fmt.Fprintln(stderr, "fleetsim:", err)
		return 1
	}
	switch args[0] {
	case "up":
		return up(ctx, dir, args[1:], stdout, stderr)
	case "restart":
		return restart(ctx, dir, args[1:], stdout, stderr)
	case "workflow":
		return workflow(ctx, dir, args[1:], stdout, stderr)
	case "machine":
		return machine(ctx, dir, args[1:], stdout, stderr)
	case "demo":
		return demo(ctx, dir, args[1:], stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "fleetsim", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "fleetsim: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// stateDir is $FLEETSIM_DIR, or .fleetsim in the working directory, made absolute.
func stateDir() (string, error) {
	dir := os.Getenv("FLEETSIM_DIR")
	if dir == "" {
		dir = ".fleetsim"
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolve FLEETSIM_DIR %q: %w", dir, err)
	}
	return abs, nil
}
