package netbox

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/folly-infra/fleetd/fleet"
	nb "github.com/netbox-community/go-netbox/v4"
)

// Update PATCHes only what the patch sets: fleetd's own custom-field keys (NetBox merges them
// per key; a cleared key is sent as null) and the status. With IfVersion it is conditional
// (If-Match): a device changed since it was read answers 412, returned as fleet.ErrConflict.
// An empty patch writes nothing (a PATCH, even an empty one, would fire a webhook) and reads
// the device instead.
func (c *Client) Update(ctx context.Context, id int64, p fleet.Patch) (fleet.Device, error) {
	if p.Empty() {
		return c.Device(ctx, id)
	}
	cf, status := patchBody(p)
	req := nb.NewPatchedWritableDeviceWithConfigContextRequest()
	if len(cf) > 0 {
		req.CustomFields = cf
	}
	if status != "" {
		req.SetStatus(nb.DeviceStatusValue(status))
	}
	what := fmt.Sprintf("update device %d", id)
	resp, body, err := c.do(ctx, request{op: "update", method: http.MethodPatch, path: devicePath(id), body: req, ifMatch: p.IfVersion})
	if err != nil {
		return fleet.Device{}, fmt.Errorf("%s: %w", what, err)
	}
	dj, err := deviceAnswer(what, id, body)
	if err != nil {
		return fleet.Device{}, err
	}
	return toDevice(dj, nil, resp.Header.Get("ETag")) // a PATCH of fleetd's keys never changes the MACs
}

// Journal adds a journal entry to the device (docs/design.md §2: one per decision). The entry is
// created_by the token's user.
func (c *Client) Journal(ctx context.Context, id int64, kind fleet.JournalKind, text string) error {
	je := nb.NewWritableJournalEntryRequest("dcim.device", id, text)
	je.SetKind(nb.JournalEntryKindValue(kind))
	if _, _, err := c.do(ctx, request{op: "journal", method: http.MethodPost, path: "/api/extras/journal-entries/", body: je}); err != nil {
		return fmt.Errorf("add a %s journal entry to device %d: %w", kind, id, err)
	}
	return nil
}

// Ping checks that NetBox answers and accepts the token (GET /api/status/), for readiness. The
// first answer that names a NetBox older than 4.6 logs a warning (once per process): such a
// NetBox sends no ETag and ignores If-Match, so fleetd's writes are last-write-wins and only one
// fleetd instance may run against it. fleetd's readiness probe pings at start, so the warning
// comes as soon as NetBox first answers.
func (c *Client) Ping(ctx context.Context) error {
	var st struct {
		Version any `json:"netbox-version"` // a string; anything else is no version
	}
	if err := c.getJSON(ctx, "ping", "/api/status/", nil, &st); err != nil {
		return fmt.Errorf("check NetBox's status: %w", err)
	}
	if v, _ := st.Version.(string); olderThan46(v) {
		c.oldNetBox.Do(func() {
			c.log.Warn().Str("netbox", c.base).Str("netbox_version", v).Msg("NetBox " + v + " is older than 4.6: it sends no ETag and ignores If-Match, " +
				"so fleetd's writes are last-write-wins; run exactly one fleetd instance against it (docs/operate.md, \"Several instances\")")
		})
	}
	return nil
}

// olderThan46 reports whether a netbox-version such as "4.5.3" or "v4.2.9-Docker-3.2.0" is
// before 4.6. A version it cannot read is not reported (the device reads warn when no ETag comes).
func olderThan46(v string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major < 4 || major == 4 && minor < 6
}
