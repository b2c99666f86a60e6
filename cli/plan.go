package cli

import (
	"context"
	"io"
	"net/url"

	"github.com/folly-infra/fleetd/api"
)

// Plan asks the running fleetd what a device's request would do (GET /v1/devices/{name}/plan,
// docs/http.md "Plan a request") and prints it: human text, or the JSON with -o json. Exit
// status 0 when the request would be carried out (or there is none), 1 when it would be
// refused, rejected or fail before anything runs, 2 when no plan could be had.
func Plan(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := newOperatorCommand("plan", "usage: fleetd plan [flags] DEVICE\n\nWhat fleetd would do for DEVICE's request, or for --action; writes nothing.", stderr)
	action := cmd.flags.String("action", "", "plan this action (provision, attest, wipe, retire) instead of the request NetBox holds")
	devices, code, ok := Parse(cmd.flags, args, stdout, stderr)
	switch {
	case !ok:
		return code
	case len(devices) == 0:
		return Misuse(cmd.flags, stderr, "name the device")
	case len(devices) > 1:
		return Misuse(cmd.flags, stderr, "one device only, not also %q", devices[1:])
	}
	c, err := cmd.client()
	if err != nil {
		return cmd.fail(err)
	}
	q := url.Values{}
	if *action != "" {
		q.Set("action", *action)
	}
	var p api.Plan
	body, err := c.get(ctx, "/v1/devices/"+url.PathEscape(devices[0])+"/plan", q, &p)
	if err != nil {
		return cmd.fail(err)
	}
	cmd.write(stdout, body, func(w io.Writer) { printPlan(w, p) })
	switch p.Outcome {
	case "rejected", "still-rejected", "template-fails":
		return 1
	}
	return 0
}
