package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/folly-infra/fleetd/api"
)

// Inventory asks the running fleetd to compare NetBox with the machines (GET /v1/inventory,
// docs/http.md "Check the inventory") and prints one line per difference: human text, or the
// JSON with -o json. Exit status 0 when every device agrees (stale facts and devices without facts
// are listed, not counted), 1 when something differs, 2 when it could not check.
func Inventory(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const usage = "usage: fleetd inventory check [flags] [DEVICE...]"
	const help = usage + "\n\nNetBox's declaration of each fleet device (or each DEVICE) against what fleetd last learned of the machine; writes nothing."
	args, code, ok := Subcommand("inventory", "check", help, args, stdout, stderr)
	if !ok {
		return code
	}
	cmd := newOperatorCommand("inventory check", help, stderr)
	devices, code, ok := Parse(cmd.flags, args, stdout, stderr)
	if !ok {
		return code
	}
	c, err := cmd.client()
	if err != nil {
		return cmd.fail(err)
	}
	var rep api.Inventory
	var body []byte
	if len(devices) == 1 {
		body, err = c.get(ctx, "/v1/devices/"+url.PathEscape(devices[0])+"/inventory", nil, &rep)
	} else {
		body, err = c.get(ctx, "/v1/inventory", url.Values{"device": devices}, &rep)
	}
	if err != nil {
		return cmd.fail(fmt.Errorf("could not check: %w", err))
	}
	cmd.write(stdout, body, func(w io.Writer) { printInventory(w, rep) })
	if rep.Differences > 0 {
		return 1
	}
	return 0
}

// printInventory writes one line per difference and per stale half, then a summary.
func printInventory(w io.Writer, r api.Inventory) {
	stale, noFacts := 0, 0
	for _, d := range r.Devices {
		for _, diff := range d.Differences {
			fmt.Fprintf(w, "%s: %s: %s (%s, %s)\n", d.Device, diff.Kind, diff.Detail, diff.Source, when(diff.At))
		}
		for _, st := range d.Stale {
			fmt.Fprintf(w, "%s: stale: the %s facts, last seen %s, are older than the declaration's change at %s by %s: not compared until the node's next accepted boot check, or an attest, reports them again\n",
				d.Device, st.Facts, when(st.Seen), when(st.DeclaredAt), st.By)
		}
		switch d.Result {
		case "stale":
			stale++
		case "no-facts":
			noFacts++
		}
	}
	fmt.Fprintf(w, "inventory: %d devices checked at %s, %d differences; %d stale, %d without facts yet\n",
		len(r.Devices), when(r.CheckedAt), r.Differences, stale, noFacts)
}

func when(t time.Time) string {
	if t.IsZero() {
		return "no time"
	}
	return t.UTC().Format(time.RFC3339)
}
