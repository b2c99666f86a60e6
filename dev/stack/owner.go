package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// Owner acts on NetBox as the owner does with curl: plain REST calls with the owner's token
// (docs/design.md §8). It reads raw JSON, independent of fleetd's own NetBox adapter.
type Owner struct {
	URL   string
	Token string
	HTTP  *http.Client
}

// NewOwner returns an Owner for a NetBox base URL and token.
func NewOwner(baseURL, token string) *Owner {
	return &Owner{URL: baseURL, Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// OwnerDevice is a device as NetBox's REST API returns it (the fields the stack reads).
type OwnerDevice struct {
	ID           int64          `json:"id"`
	Name         string         `json:"name"`
	Status       choice         `json:"status"`
	CustomFields map[string]any `json:"custom_fields"`
}

type choice struct {
	Value string `json:"value"`
}

// StatusValue is the device status, e.g. "planned".
func (d OwnerDevice) StatusValue() string { return d.Status.Value }

// Field returns a custom field as text ("" when null or unset).
func (d OwnerDevice) Field(name string) string {
	switch v := d.CustomFields[name].(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

// JournalEntry is a journal entry as NetBox's REST API returns it.
type JournalEntry struct {
	ID       int64  `json:"id"`
	Kind     choice `json:"kind"`
	Comments string `json:"comments"`
}

// KindValue is the entry's kind: info, success, warning or danger.
func (j JournalEntry) KindValue() string { return j.Kind.Value }

// Device reads a device by its exact name.
func (o *Owner) Device(ctx context.Context, name string) (OwnerDevice, error) {
	var page struct {
		Results []OwnerDevice `json:"results"`
	}
	if err := o.do(ctx, http.MethodGet, "/api/dcim/devices/?name="+url.QueryEscape(name), nil, &page); err != nil {
		return OwnerDevice{}, err
	}
	if len(page.Results) != 1 {
		return OwnerDevice{}, fmt.Errorf("read device %q: NetBox has %d devices of that name", name, len(page.Results))
	}
	return page.Results[0], nil
}

// Devices lists every device, ordered by id, a page of 1,000 (NetBox's MAX_PAGE_SIZE) at a time.
func (o *Owner) Devices(ctx context.Context) ([]OwnerDevice, error) {
	var out []OwnerDevice
	for offset := 0; ; {
		var page struct {
			Count   int           `json:"count"`
			Results []OwnerDevice `json:"results"`
		}
		path := fmt.Sprintf("/api/dcim/devices/?limit=1000&offset=%d&exclude=config_context", offset)
		if err := o.do(ctx, http.MethodGet, path, nil, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Results...)
		offset += len(page.Results)
		if len(page.Results) == 0 || offset >= page.Count {
			break
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Patch changes a device as the owner: body is the JSON object sent, e.g.
// {"custom_fields": {"desired_action": "provision"}} or {"status": "decommissioning"}.
func (o *Owner) Patch(ctx context.Context, id int64, body map[string]any) (OwnerDevice, error) {
	var d OwnerDevice
	err := o.do(ctx, http.MethodPatch, "/api/dcim/devices/"+strconv.FormatInt(id, 10)+"/", body, &d)
	return d, err
}

// Journal lists the device's journal entries, oldest first (NetBox lists the newest first).
func (o *Owner) Journal(ctx context.Context, id int64) ([]JournalEntry, error) {
	var page struct {
		Results []JournalEntry `json:"results"`
	}
	path := "/api/extras/journal-entries/?limit=1000&assigned_object_type=dcim.device&assigned_object_id=" + strconv.FormatInt(id, 10)
	if err := o.do(ctx, http.MethodGet, path, nil, &page); err != nil {
		return nil, err
	}
	sort.Slice(page.Results, func(i, j int) bool { return page.Results[i].ID < page.Results[j].ID })
	return page.Results, nil
}

func (o *Owner) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: encode body: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, o.URL+path, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Token "+o.Token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := o.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: NetBox answered %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}
