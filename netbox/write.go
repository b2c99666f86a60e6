package netbox

import (
	"context"
	"fmt"
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

// Ping checks that NetBox answers and accepts the token (GET /api/status/), for readiness.
func (c *Client) Ping(ctx context.Context) error {
	start := time.Now()
	_, resp, err := c.api.StatusAPI.StatusRetrieve(ctx).Execute()
	c.metrics.observe("ping", start, resp, err)
	if err != nil {
		return classify("check NetBox's status", resp, err)
	}
	return nil
}
