package netbox

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/folly-infra/fleetd/fleet"
)

var _ fleet.NetBox = (*Client)(nil)

// pageSize is NetBox's MAX_PAGE_SIZE default: lists are read 1,000 at a time.
const pageSize = 1000

// Device reads one device by id, with its MACs, and its ETag as Version. The device and its
// interfaces (which carry their MACs) are two requests that need only the id, so they are sent
// at once: a decision's read waits for one NetBox round trip, not two (docs/performance.md).
func (c *Client) Device(ctx context.Context, id int64) (fleet.Device, error) {
	var (
		ifaces []ifaceJSON
		ierr   error
		wg     sync.WaitGroup
	)
	wg.Go(func() { ifaces, ierr = c.interfaces(ctx, id) })
	dj, etag, err := c.device(ctx, id)
	wg.Wait()
	if err != nil { // the device's own answer says most (a 404 is ErrNotFound)
		return fleet.Device{}, err
	}
	if ierr != nil {
		return fleet.Device{}, ierr
	}
	return toDevice(dj, orderMACs(ifaces), etag)
}

// DeviceFields reads one device by id, without its MACs (one request), and its ETag as Version.
func (c *Client) DeviceFields(ctx context.Context, id int64) (fleet.Device, error) {
	dj, etag, err := c.device(ctx, id)
	if err != nil {
		return fleet.Device{}, err
	}
	return toDevice(dj, nil, etag)
}

// device reads one device by id, and its ETag.
func (c *Client) device(ctx context.Context, id int64) (deviceJSON, string, error) {
	what := fmt.Sprintf("read device %d", id)
	resp, body, err := c.do(ctx, request{op: "device", method: http.MethodGet, path: devicePath(id)})
	if err != nil {
		return deviceJSON{}, "", fmt.Errorf("%s: %w", what, err)
	}
	dj, err := deviceAnswer(what, id, body)
	if err != nil {
		return deviceJSON{}, "", err
	}
	etag := resp.Header.Get("ETag")
	if etag == "" {
		c.noETag.Do(func() {
			c.log.Warn().Str("netbox", c.base).Msg("NetBox answered a device read without an ETag (NetBox before 4.6): " +
				"fleetd's writes are last-write-wins, so run only one fleetd instance (docs/operate.md, \"Several instances\")")
		})
	}
	return dj, etag, nil
}

func devicePath(id int64) string { return "/api/dcim/devices/" + strconv.FormatInt(id, 10) + "/" }

// deviceAnswer decodes NetBox's answer with one device (a read or an update) and checks that it
// is the device asked for.
func deviceAnswer(what string, id int64, body []byte) (deviceJSON, error) {
	var dj deviceJSON
	if err := decodeLenient(body, &dj); err != nil {
		return dj, fmt.Errorf("%s: %w", what, err)
	}
	if dj.ID != id {
		return deviceJSON{}, fmt.Errorf("%s: NetBox answered with device %d, not %d: is the NetBox URL right?", what, dj.ID, id)
	}
	return dj, nil
}

// DeviceID finds the id of the device of this exact name, asking only for the ids (?fields=id):
// the caller reads the device by id, with its ETag (a list carries none) and its change log at
// once.
func (c *Client) DeviceID(ctx context.Context, name string) (int64, error) {
	what := fmt.Sprintf("find device %q", name)
	_, body, err := c.do(ctx, request{op: "device_by_name", method: http.MethodGet, path: "/api/dcim/devices/",
		query: url.Values{"name": {name}, "limit": {"2"}, "fields": {"id"}}})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	var devs deviceListJSON
	if err := decodeLenient(body, &devs); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	switch len(devs.Results) {
	case 0:
		return 0, fmt.Errorf("%s: NetBox has no device of that name: %w", what, fleet.ErrNotFound)
	case 1:
		return devs.Results[0].ID, nil
	}
	return 0, fmt.Errorf("%s: NetBox has more than one device of that name (in different sites); rename one", what)
}

// DeviceByName reads one device by its exact name (DeviceID, then Device).
func (c *Client) DeviceByName(ctx context.Context, name string) (fleet.Device, error) {
	id, err := c.DeviceID(ctx, name)
	if err != nil {
		return fleet.Device{}, err
	}
	return c.Device(ctx, id)
}

// Devices lists every device with its MACs: the interfaces (which carry their MACs) and the
// devices are each read as a paged list (1,000 per page), the two lists at once, and joined here,
// never one request per device. Each device is converted as it is decoded, so NetBox's
// representation of the whole fleet is never held at once. Versions are empty: NetBox sends no
// ETag on lists. config_context is excluded: fleetd does not use it.
func (c *Client) Devices(ctx context.Context) ([]fleet.Device, error) {
	var ifaces []ifaceJSON
	var ifaceErr error
	ictx, cancel := context.WithCancel(ctx) // a failed device list ends the interfaces' too
	defer cancel()
	done := make(chan struct{})
	go func() { // the longer list: at 10,000 devices, 40 pages of interfaces to 10 of devices
		defer close(done)
		ifaces, ifaceErr = c.interfaces(ictx, 0)
	}()
	out, err := listed(ctx, c, "devices", "/api/dcim/devices/", url.Values{"fields": {deviceFields}}, func(dj deviceJSON) (fleet.Device, bool, error) {
		d, err := toDevice(dj, nil, "")
		return d, err == nil, err
	})
	if err != nil {
		cancel()
		<-done
		return nil, fmt.Errorf("list devices: %w", err)
	}
	<-done
	if ifaceErr != nil {
		return nil, ifaceErr
	}
	// Each device's interfaces, grouped once: ordering the whole fleet's MACs for every device
	// was quadratic (30 MB of garbage per 1,000-device list).
	byDevice := map[int64][]ifaceJSON{}
	for _, f := range ifaces {
		byDevice[f.Device.ID] = append(byDevice[f.Device.ID], f)
	}
	for i := range out {
		out[i].MACs = orderMACs(byDevice[out[i].ID])
	}
	return out, nil
}

// interfaces reads the interfaces of one device (or of all, device 0), with their MACs, only the
// fields fleetd reads (ifaceFields). They are decoded leniently: go-netbox's interface type is a
// closed enum and NetBox keeps adding types.
func (c *Client) interfaces(ctx context.Context, device int64) ([]ifaceJSON, error) {
	q := url.Values{"fields": {ifaceFields}}
	if device != 0 {
		q.Set("device_id", strconv.FormatInt(device, 10))
	}
	out, err := listed(ctx, c, "interfaces", "/api/dcim/interfaces/", q, all[ifaceJSON])
	if err != nil {
		return nil, fmt.Errorf("list interfaces (device %d): %w", device, err)
	}
	return out, nil
}

// listed reads every page of the NetBox list at path that the filters q select (eachListed) and
// returns what keep makes of each result, leaving out those it declines (false); keep's first
// error ends the list. Each page's results go into a slice of the page's size (the list's count,
// at most a page), and the pages are joined once at the end: grown by append past the first
// page, the listing of 10,000 devices (2 KB each) copied itself over about 90 MB a pass.
func listed[T, U any](ctx context.Context, c *Client, op, path string, q url.Values, keep func(T) (U, bool, error)) ([]U, error) {
	var pages [][]U
	total := 0
	err := eachListed(ctx, c, op, path, q, func(v T, sizeHint int) error {
		u, ok, err := keep(v)
		if err != nil || !ok {
			return err
		}
		if len(pages) == 0 || len(pages[len(pages)-1]) == cap(pages[len(pages)-1]) {
			pages = append(pages, make([]U, 0, max(sizeHint, 1)))
		}
		pages[len(pages)-1] = append(pages[len(pages)-1], u)
		total++
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case len(pages) <= 1: // one page (or none): no copy
		if len(pages) == 0 {
			return nil, nil
		}
		return pages[0], nil
	}
	out := make([]U, 0, total)
	for _, p := range pages {
		out = append(out, p...)
	}
	return out, nil
}

// all is the keep of a list whose every result is wanted as it is decoded.
func all[T any](v T) (T, bool, error) { return v, true, nil }

// eachListed reads every page of the NetBox list at path that the filters q select, pageSize
// results at a time (q's limit and offset are set here), and calls each with every result as it
// is decoded (leniently) and a capacity to size a slice with (the list's count as NetBox sent it
// before the results, at most a page: a count is NetBox's word, not a bound), stopping at its
// first error. A page is read through the retrying client and metered as op.
func eachListed[T any](ctx context.Context, c *Client, op, path string, q url.Values, each func(v T, sizeHint int) error) error {
	q.Set("limit", strconv.Itoa(pageSize))
	for offset := 0; ; {
		q.Set("offset", strconv.Itoa(offset))
		count, n, err := getPage(ctx, c, op, path, q, each)
		if err != nil {
			return err
		}
		offset += n
		if n == 0 || offset >= count {
			return nil
		}
	}
}

// getPage reads one page of a NetBox list, calling each with every result, and returns the list's
// count and how many results the page held. The results are decoded one at a time as the answer
// arrives: a page of 1,000 devices is a few MB that is never held whole. The decoder is the JSON
// v2 implementation's (github.com/go-json-experiment/json), which reads each byte once: the
// standard library's Decoder scans a value to find its end, then validates and decodes it, and on
// a listing of 10,000 running nodes (their certificate chains in base64) that was most of a
// reconcile pass's CPU (docs/performance.md). It is as lenient as decodeLenient: unknown members
// are skipped, and invalid UTF-8 and duplicate names are accepted.
func getPage[T any](ctx context.Context, c *Client, op, path string, q url.Values, each func(v T, sizeHint int) error) (count, n int, err error) {
	resp, err := c.send(ctx, request{op: op, method: http.MethodGet, path: path, query: q})
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	dec := jsontext.NewDecoder(io.LimitReader(resp.Body, maxAnswer), lenientJSON)
	fail := func(err error) (int, int, error) {
		return 0, 0, fmt.Errorf("decode NetBox's answer (%s): %w", resp.Status, err)
	}
	if err := expectDelim(dec, '{'); err != nil {
		return fail(err)
	}
	for dec.PeekKind() != '}' {
		key, err := dec.ReadToken()
		if err != nil {
			return fail(err)
		}
		switch key.String() {
		case "count":
			if err := jsonv2.UnmarshalDecode(dec, &count, lenientJSON); err != nil {
				return fail(err)
			}
		case "results":
			if err := expectDelim(dec, '['); err != nil {
				return fail(err)
			}
			for dec.PeekKind() != ']' {
				var v T
				if err := jsonv2.UnmarshalDecode(dec, &v, lenientJSON); err != nil {
					return fail(err)
				}
				if err := each(v, min(max(count, 0), pageSize)); err != nil {
					return 0, 0, err
				}
				n++
			}
			if err := expectDelim(dec, ']'); err != nil {
				return fail(err)
			}
		default: // next, previous
			if err := dec.SkipValue(); err != nil {
				return fail(err)
			}
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return fail(err)
	}
	return count, n, nil
}

// lenientJSON are the JSON v2 options of a lenient decode (decodeLenient's leniency): invalid
// UTF-8 and duplicate member names are accepted, as the standard library accepts them.
var lenientJSON = jsonv2.JoinOptions(jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true))

// expectDelim reads the next token and refuses anything but d.
func expectDelim(dec *jsontext.Decoder, d jsontext.Kind) error {
	t, err := dec.ReadToken()
	if err != nil {
		return err
	}
	if t.Kind() != d {
		return fmt.Errorf("found %v where a list page has %q", t, d)
	}
	return nil
}

// getJSON sends a GET and decodes a 2xx answer leniently.
func (c *Client) getJSON(ctx context.Context, op, path string, q url.Values, out any) error {
	_, body, err := c.do(ctx, request{op: op, method: http.MethodGet, path: path, query: q})
	if err != nil {
		return err
	}
	return decodeLenient(body, out)
}
