package netbox

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/folly-infra/fleetd/fleet"
)

// The page sizes of a device's change log read newest first: a small first page, since fleetd's
// own newest save of its fields is nearly always the device's last save or the one before an
// owner's request (each entry carries the device's whole custom fields twice: 8 entries made a
// configuration fetch a fifth slower on the emulator than 2), then larger ones.
const (
	historyFirstPage = 2
	historyPage      = 50
)

// historyFields is what fleetd asks of a change (?fields=, NetBox 4.0 and later): not the changed
// object nested, the user nested, the representation or the message NetBox would render.
const historyFields = "id,time,user_name,changed_object_id,prechange_data,postchange_data"

// DeviceHistory reads the saves of one device in NetBox's change log (/api/core/object-changes/,
// NetBox 4.1 and later; its creation and its updates), newest first (NetBox's default ordering,
// -time, asked for explicitly), a page at a time, until a save for which until reports true or
// the end of the log (fleet.NetBox). The filters are NetBox's own: changed_object_type and
// changed_object_id.
func (c *Client) DeviceHistory(ctx context.Context, id int64, until func(fleet.DeviceChange) bool) ([]fleet.DeviceChange, error) {
	q := url.Values{"changed_object_type": {"dcim.device"}, "changed_object_id": {strconv.FormatInt(id, 10)}, "ordering": {"-time"},
		"fields": {historyFields}}
	var out []fleet.DeviceChange
	done := false
	for offset, size := 0, historyFirstPage; !done; size = historyPage {
		q.Set("limit", strconv.Itoa(size))
		q.Set("offset", strconv.Itoa(offset))
		count, n, err := getPage(ctx, c, "device_history", "/api/core/object-changes/", q, func(ch changeJSON, _ int) error {
			if done {
				return nil
			}
			dc, err := toDeviceChange(ch)
			if err != nil {
				return err
			}
			out = append(out, dc)
			done = until(dc)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read the change log of device %d: %w", id, err)
		}
		offset += n
		done = done || n < size || offset >= count
	}
	return out, nil
}
