package netbox

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/fleet"
)

// changeJSON is the part of an ObjectChange fleetd reads (NB@v4.6.8:netbox/core/api/
// serializers_/change_logging.py): the pre- and post-change data are the model's snapshots, whose
// custom_fields is the raw custom_field_data (select values as their raw strings).
type changeJSON struct {
	Time      string         `json:"time"`
	UserName  string         `json:"user_name"`
	ObjectID  int64          `json:"changed_object_id"`
	PreChange map[string]any `json:"prechange_data"`
	PostData  map[string]any `json:"postchange_data"`
}

// DeviceChanges lists the updates of devices in NetBox's change log (/api/core/object-changes/,
// NetBox 4.1 and later) that q selects and q.Keep keeps, oldest first, in pages of 1,000, each
// change decoded and kept or dropped as it arrives (fleet.ChangeLog). The filters are NetBox's own: changed_object_type, action, time_after (inclusive),
// changed_object_id and user_name__n.
func (c *Client) DeviceChanges(ctx context.Context, q fleet.ChangeQuery) ([]fleet.DeviceChange, error) {
	v := url.Values{"changed_object_type": {"dcim.device"}, "action": {"update"}, "ordering": {"time"},
		"time_after": {q.Since.UTC().Format(time.RFC3339Nano)}}
	if q.DeviceID != 0 {
		v.Set("changed_object_id", strconv.FormatInt(q.DeviceID, 10))
	}
	if q.ExceptUser != "" {
		v.Set("user_name__n", q.ExceptUser)
	}
	out, err := listed(ctx, c, "object_changes", "/api/core/object-changes/", v, func(ch changeJSON) (fleet.DeviceChange, bool, error) {
		dc, err := toDeviceChange(ch)
		return dc, err == nil && (q.Keep == nil || q.Keep(dc)), err
	})
	if err != nil {
		return nil, fmt.Errorf("list device changes since %s: %w", q.Since.UTC().Format(time.RFC3339), err)
	}
	return out, nil
}

// MACChanges lists the saves of MAC address objects (dcim.macaddress: created, updated, deleted)
// in NetBox's change log since q.Since by users other than q.ExceptUser, oldest first, with the
// address before and after (fleet.ChangeLog). A MAC's save names no device (NetBox records no
// related object for it), so the caller matches the addresses.
func (c *Client) MACChanges(ctx context.Context, q fleet.ChangeQuery) ([]fleet.MACChange, error) {
	v := url.Values{"changed_object_type": {"dcim.macaddress"}, "ordering": {"time"},
		"time_after": {q.Since.UTC().Format(time.RFC3339Nano)}}
	if q.ExceptUser != "" {
		v.Set("user_name__n", q.ExceptUser)
	}
	changes, err := c.objectChanges(ctx, v)
	if err != nil {
		return nil, fmt.Errorf("list MAC address changes since %s: %w", q.Since.UTC().Format(time.RFC3339), err)
	}
	out := make([]fleet.MACChange, 0, len(changes))
	for _, ch := range changes {
		t, err := time.Parse(time.RFC3339Nano, ch.Time)
		if err != nil {
			return nil, fmt.Errorf("change of MAC address %d: time %q: %w", ch.ObjectID, ch.Time, err)
		}
		out = append(out, fleet.MACChange{User: ch.UserName, Time: t, Before: snapshotMAC(ch.PreChange), After: snapshotMAC(ch.PostData)})
	}
	return out, nil
}

// objectChanges reads every page of NetBox's change log that the filters v select.
func (c *Client) objectChanges(ctx context.Context, v url.Values) ([]changeJSON, error) {
	return listed(ctx, c, "object_changes", "/api/core/object-changes/", v, all[changeJSON])
}

// snapshotMAC is a MAC address snapshot's mac_address as fleetd writes MACs ("" for none).
func snapshotMAC(snap map[string]any) string {
	s, _ := snap["mac_address"].(string)
	return strings.ToLower(strings.TrimSpace(s))
}

func toDeviceChange(ch changeJSON) (fleet.DeviceChange, error) {
	t, err := time.Parse(time.RFC3339Nano, ch.Time)
	if err != nil {
		return fleet.DeviceChange{}, fmt.Errorf("change of device %d: time %q: %w", ch.ObjectID, ch.Time, err)
	}
	before, err := FieldsOf(asMap(ch.PreChange["custom_fields"]))
	if err != nil {
		return fleet.DeviceChange{}, fmt.Errorf("change of device %d at %s, before: %w", ch.ObjectID, ch.Time, err)
	}
	after, err := FieldsOf(asMap(ch.PostData["custom_fields"]))
	if err != nil {
		return fleet.DeviceChange{}, fmt.Errorf("change of device %d at %s, after: %w", ch.ObjectID, ch.Time, err)
	}
	return fleet.DeviceChange{DeviceID: ch.ObjectID, User: ch.UserName, Time: t, Before: before, After: after}, nil
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
