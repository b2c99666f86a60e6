// Command fleetd decides how a bare machine becomes a node of the cluster and how it leaves
// (docs/design.md §1). One binary, four roles:
//
//	fleetd serve --config fleetd.yaml     the service, on spore
//	fleetd check --config fleetd.yaml     validate the config, classes.json and netbox-webhooks.yaml
//	fleetd enroll [flags]                 the HookOS agent (first action of every Workflow)
//	fleetd wipe-receipt [flags]           the HookOS agent after a wipe's erase: the TPM's receipt
//	fleetd talos-meta [flags]             the HookOS agent after a Talos image write: the fetch secret into META
//	fleetd boot-check [flags]             the running node's hourly boot check
//	fleetd plan DEVICE [--action A]       what fleetd would do for a device's request, writing nothing
//	fleetd inventory check [DEVICE...]    NetBox's declaration against the machines' attested facts
//
// This package is main and what composes the server (serve.go, wire.go, loops.go, logging.go);
// every other command is package cli's, which never imports this one (docs/design.md,
// "Packages").
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/folly-infra/fleetd/cli"
)

// version is stamped at build time (-X main.version=...).
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: fleetd <command> [flags]

commands:
  serve --config FILE       run the service
  check --config FILE       validate the config, classes.json and netbox-webhooks.yaml, then exit
  enroll [flags]            HookOS agent: prove the machine's identity and fetch its certificates
  wipe-receipt [flags]      HookOS agent: after a wipe's erase, send the TPM's receipt of it
  talos-meta [flags]        HookOS agent: after a Talos image write, put the fetch secret into its META
  boot-check [flags]        running node: send the hourly boot check
  policy learn [flags]      add a known-good HookOS netboot to the boot policy
  plan [flags] DEVICE       what fleetd would do for the device's request (or --action); writes nothing
  inventory check [DEVICE...]
                            NetBox's declaration against what fleetd last learned of the machines
  version                   print the version

Run "fleetd <command> --help" for a command's flags.
`

// run dispatches the command and returns the process exit code. Every command but serve and
// version is package cli's.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "check":
		return cli.Check(args[1:], stdout, stderr)
	case "enroll":
		return cli.Enroll(ctx, args[1:], stdout, stderr)
	case "wipe-receipt":
		return cli.WipeReceipt(ctx, args[1:], stdout, stderr)
	case "talos-meta":
		return cli.TalosMeta(ctx, args[1:], stdout, stderr)
	case "boot-check":
		return cli.BootCheck(ctx, args[1:], stdout, stderr)
	case "policy":
		return cli.Policy(args[1:], stdout, stderr)
	case "plan":
		return cli.Plan(ctx, args[1:], stdout, stderr)
	case "inventory":
		return cli.Inventory(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-v":
		return printVersion(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "fleetd: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func printVersion(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("version", "usage: fleetd version\n\nPrints fleetd's version.")
	pos, code, ok := cli.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := cli.NoArgs(fs, pos, stderr); !ok {
		return code
	}
	fmt.Fprintln(stdout, "fleetd", version)
	return 0
}
