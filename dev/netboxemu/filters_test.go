package netboxemu

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// listNames GETs a list and returns the names (or MACs, addresses) of the results, or the 400.
func (f *fixture) listNames(t *testing.T, path string) ([]string, int, string) {
	t.Helper()
	status, _, body := f.do(t, "GET", path, bearer(f.fleetd), "")
	if status != 200 {
		return nil, status, string(body)
	}
	var page struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatalf("GET %s: %v %s", path, err, body)
	}
	var out []string
	for _, r := range page.Results {
		for _, k := range []string{"name", "mac_address", "address", "object_repr"} {
			if s, ok := r[k].(string); ok {
				out = append(out, s)
				break
			}
		}
	}
	slices.Sort(out)
	return out, status, ""
}

// TestFilters: NetBox 4.6.8's filter semantics on the emulator's devices, and the refusals of
// what it does not implement, each named in the 400 (an unknown filter never widens a list).
func TestFilters(t *testing.T) {
	f := newFixture(t)
	seedClientInventory(t, f)
	all := []string{"nix-builder", "node1", "node2", "worker-a", "worker-b"}
	tests := []struct {
		name   string
		query  string
		want   []string // nil: a 400 containing refuse
		refuse string
	}{
		{"ok/no-filter", "", all, ""},
		{"ok/empty-value-is-no-filter", "?name=", all, ""},
		{"ok/name-iexact", "?name=WORKER-A", []string{"worker-a"}, ""},
		{"ok/name-two-values-or", "?name=node1&name=node2", []string{"node1", "node2"}, ""},
		{"ok/filters-and", "?status=active&cf_tpm=2.0", []string{"worker-a"}, ""},
		{"ok/name-nic", "?name__nic=ode", []string{"nix-builder", "worker-a", "worker-b"}, ""},
		{"ok/name-regex", "?name__regex=^w.*b$", []string{"worker-b"}, ""},
		{"ok/name-iregex", "?name__iregex=^NODE[0-9]$", []string{"node1", "node2"}, ""},
		{"ok/serial-empty-false", "?serial__empty=false", []string{"node1", "node2", "worker-a", "worker-b"}, ""},
		{"ok/asset-tag-null", "?asset_tag=null", all, ""},
		{"ok/cf-select-isw", "?cf_tpm__isw=2", []string{"node1", "worker-a"}, ""},
		{"ok/cf-select-nie", "?cf_fleet_state__nie=PENDING", []string{"nix-builder", "node1", "node2", "worker-b"}, ""},
		{"ok/cf-null-and-value", "?cf_fleet_state=null&cf_fleet_state=active", []string{"nix-builder", "node1", "node2", "worker-b"}, ""},
		{"ok/cf-empty-false", "?cf_fleet_state__empty=false", []string{"worker-a", "worker-b"}, ""},
		{"ok/q-trims-to-nothing", "?q=%20", all, ""},
		{"ok/last-updated-gte", "?last_updated__gte=2000-01-01", all, ""},
		{"ok/created-lt-epoch", "?created__lt=2000-01-01T00:00:00Z", nil, ""},
		{"ok/mac-isw-lowercase-text", "?mac_address__isw=AA:BB:CC:00:22", []string{"worker-a", "worker-b"}, ""},
		{"ok/mac-invalid-matches-nothing", "?mac_address=zz", nil, ""},
		{"refuse/unknown-param", "?rack_id=1", nil, `rack_id`},
		{"refuse/unknown-lookup", "?serial__gt=1", nil, `serial__gt`},
		{"refuse/loose-text-lookup", "?cf_fleet_class__ic=nix", nil, `lookup __ic on a text custom field (filter_logic loose)`},
		{"refuse/json-cf", "?cf_fleet_identity=x", nil, `no filter for json custom fields`},
		{"refuse/bad-boolean", "?has_primary_ip=1", nil, `a boolean filter takes true or false`},
		{"refuse/bad-datetime", "?created__gte=soon", nil, `Enter a valid date/time.`},
		{"refuse/bad-regex", "?name__regex=(", nil, `cannot compile this regular expression`},
		{"refuse/status-lookup-outside-choices", "?status__ic=act", nil, `act is not one of the available choices`},
		{"refuse/unknown-ordering", "?ordering=rack", nil, `does not implement ordering`},
		{"refuse/start-with-offset", "?start=1&offset=1", nil, `mutually exclusive`},
		{"refuse/browsable-api", "?format=api", nil, `browsable API`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, status, body := f.listNames(t, "/api/dcim/devices/"+tt.query)
			if tt.refuse != "" {
				if status != 400 || !strings.Contains(body, tt.refuse) {
					t.Errorf("GET %s = %d %s, want 400 naming %q", tt.query, status, body, tt.refuse)
				}
				return
			}
			if status != 200 || !slices.Equal(got, tt.want) {
				t.Errorf("GET %s = %d %v %s, want %v", tt.query, status, got, body, tt.want)
			}
		})
	}
}

// TestCustomFieldFilterLogic: a text field set to exact gains the char lookups and loses
// icontains; one set to disabled is no filter at all (refused, where NetBox ignores it).
func TestCustomFieldFilterLogic(t *testing.T) {
	f := newFixture(t)
	seedClientInventory(t, f)
	setLogic := func(logic string) {
		t.Helper()
		var id int
		for cid, cf := range f.emu.db.customFields {
			if cf.name == "fleet_class" {
				id = cid
			}
		}
		status, _, body := f.do(t, "PATCH", "/api/extras/custom-fields/"+strconv.Itoa(id)+"/", "Token "+f.admin,
			`{"filter_logic": "`+logic+`"}`)
		if status != 200 {
			t.Fatalf("set filter_logic %s: %d %s", logic, status, body)
		}
	}
	setLogic("exact")
	if got, _, body := f.listNames(t, "/api/dcim/devices/?cf_fleet_class=worker"); got != nil {
		t.Errorf("exact cf_fleet_class=worker = %v %s, want nothing (no longer icontains)", got, body)
	}
	if got, _, _ := f.listNames(t, "/api/dcim/devices/?cf_fleet_class__ic=WORKER"); !slices.Equal(got, []string{"worker-a", "worker-b"}) {
		t.Errorf("exact cf_fleet_class__ic=WORKER = %v", got)
	}
	setLogic("disabled")
	if _, status, body := f.listNames(t, "/api/dcim/devices/?cf_fleet_class=talos-cp"); status != 400 || !strings.Contains(body, "filter_logic is disabled") {
		t.Errorf("disabled cf_fleet_class = %d %s, want a 400 saying the field's filtering is disabled", status, body)
	}
}

// TestFiltersOfOtherEndpoints: the filter sets of interfaces, MACs, IPs and the extras.
func TestFiltersOfOtherEndpoints(t *testing.T) {
	f := newFixture(t)
	seedClientInventory(t, f)
	tests := []struct{ path, want string }{
		{"/api/dcim/interfaces/?device=worker-a", "eth0"},
		{"/api/dcim/interfaces/?mac_address=AA-BB-CC-00-11-99", "bmc"},
		{"/api/dcim/interfaces/?type=1000base-t&mgmt_only=false&device_id=1", "eth0"},
		{"/api/dcim/mac-addresses/?device=node1&primary=false", "AA:BB:CC:00:11:23"},
		{"/api/dcim/mac-addresses/?assigned_object_type=DCIM.Interface&mac_address__iew=99", "AA:BB:CC:00:11:99"},
		{"/api/ipam/ip-addresses/?device=node1&family=4&mask_length=24", "10.0.0.21/24"},
		{"/api/ipam/ip-addresses/?q=10.0.0", "10.0.0.21/24"},
		{"/api/extras/custom-fields/?type=select&choice_set=fleet_tpm", "tpm"},
		{"/api/extras/custom-fields/?q=outcome+of+the+last+boot", "boot_check"},
		{"/api/extras/custom-field-choice-sets/?choice=TPM+1.2", "fleet_tpm"},
		{"/api/extras/webhooks/?payload_url=webhook/wipe", "fleetd-wipe"},
		{"/api/extras/event-rules/?event_type=object_deleted&object_type=dcim.interface", "fleetd-inventory-addressing"},
	}
	for _, tt := range tests {
		got, status, body := f.listNames(t, tt.path)
		if status != 200 || !slices.Equal(got, []string{tt.want}) {
			t.Errorf("GET %s = %d %v %s, want [%s]", tt.path, status, got, body, tt.want)
		}
	}
	for _, refused := range []string{"/api/dcim/interfaces/?device_id=99", "/api/dcim/interfaces/?kind=virtual",
		"/api/extras/webhooks/?payload_url__n=x", "/api/extras/journal-entries/?created__gte=2000-01-01",
		"/api/extras/journal-entries/?created=2000-01-01", "/api/core/object-changes/?changed_object_type__n=dcim.device"} {
		if _, status, body := f.listNames(t, refused); status != 400 {
			t.Errorf("GET %s = %d %s, want 400", refused, status, body)
		}
	}
}
