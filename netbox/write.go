package netbox

import (
	"context"
	"fmt"
	"strings"
	"time"

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
	if p.IfVersion != "" {
		ctx = context.WithValue(ctx, ifMatchKey{}, p.IfVersion)
	}
	start := time.Now()
	d, resp, err := c.api.DcimAPI.DcimDevicesPartialUpdate(ctx, int32(id)).PatchedWritableDeviceWithConfigContextRequest(*req).Execute()
	c.metrics.observe("update", start, resp, err)
	dj, err := deviceAnswer(fmt.Sprintf("update device %d", id), d, resp, err)
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
	start := time.Now()
	_, resp, err := c.api.ExtrasAPI.ExtrasJournalEntriesCreate(ctx).WritableJournalEntryRequest(*je).Execute()
	c.metrics.observe("journal", start, resp, err)
	if _, lenient := decodeOnly(resp, err); err != nil && !lenient {
		return classify(fmt.Sprintf("add a %s journal entry to device %d", kind, id), resp, err)
	}
	return nil
}

// Ping checks that NetBox answers and accepts the token (GET /api/status/), for readiness. The
// first answer that names a NetBox older than 4.6 logs a warning (once per process): such a
// NetBox sends no ETag and ignores If-Match, so fleetd's writes are last-write-wins and only one
// fleetd instance may run against it. fleetd's readiness probe pings at start, so the warning
// comes as soon as NetBox first answers.
func (c *Client) Ping(ctx context.Context) error {
	start := time.Now()
	st, resp, err := c.api.StatusAPI.StatusRetrieve(ctx).Execute()
	c.metrics.observe("ping", start, resp, err)
	if err != nil {
		return classify("check NetBox's status", resp, err)
	}
	if v, _ := st["netbox-version"].(string); olderThan46(v) {
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
