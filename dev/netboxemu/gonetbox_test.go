package netboxemu

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	nb "github.com/netbox-community/go-netbox/v4"
)

// The go-netbox v4.3.0 client (strict decoding: required properties, closed enums) decodes
// every response fleetd reads from the emulator.

func TestGoNetboxDecodesDevices(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	list, _, err := f.client.DcimAPI.DcimDevicesList(ctx).Name([]string{"node1"}).Limit(1000).Execute()
	if err != nil {
		t.Fatalf("list devices: %v", err)
	}
	if list.Count != 1 || len(list.Results) != 1 {
		t.Fatalf("list = %d results, count %d", len(list.Results), list.Count)
	}
	d := list.Results[0]
	if d.GetName() != "node1" || d.GetSerial() != "SN-1" || int64(d.Id) != f.dev {
		t.Errorf("device = %s/%s/%d", d.GetName(), d.GetSerial(), d.Id)
	}
	if got := d.PrimaryIp4.Get().GetAddress(); got != "10.0.0.21/24" {
		t.Errorf("primary_ip4 = %q", got)
	}
	if got := d.Status.GetValue(); got != nb.DEVICESTATUSVALUE_PLANNED {
		t.Errorf("status = %q", got)
	}
	if d.Role.Depth != 0 || d.Site.Name != "folly" || d.DeviceType.Manufacturer.Name != "Generic" {
		t.Errorf("nested = %+v / %+v / %+v", d.Role, d.Site, d.DeviceType)
	}
	// Every defined custom field is listed; unset ones are null.
	if len(d.CustomFields) != f.cfs || d.CustomFields["fleet_class"] != "talos-cp" || d.CustomFields["fleet_state"] != nil {
		t.Errorf("custom_fields = %v", d.CustomFields)
	}
	if _, ok := d.CustomFields["desired_action"]; !ok {
		t.Error("desired_action missing from custom_fields: NetBox lists every defined field")
	}

	got, resp, err := f.client.DcimAPI.DcimDevicesRetrieve(ctx, int32(f.dev)).Execute()
	if err != nil {
		t.Fatalf("retrieve: %v", err)
	}
	if got.GetName() != "node1" || resp.Header.Get("ETag") == "" || resp.Header.Get("API-Version") != "4.6" {
		t.Errorf("retrieve: %s ETag %q API-Version %q", got.GetName(), resp.Header.Get("ETag"), resp.Header.Get("API-Version"))
	}
	if lu := got.LastUpdated.Get(); lu == nil || lu.IsZero() {
		t.Error("last_updated did not decode")
	}
}

func TestGoNetboxPaginates(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 120; i++ {
		if _, err := f.emu.AddDevice(DeviceSpec{Name: fmt.Sprintf("gen%03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	first, _, err := f.client.DcimAPI.DcimDevicesList(ctx).Execute()
	if err != nil {
		t.Fatal(err)
	}
	if first.Count != 121 || len(first.Results) != 50 || first.Next.Get() == nil || first.Previous.Get() != nil {
		t.Fatalf("default page: count %d, %d results, next %v", first.Count, len(first.Results), first.Next.Get())
	}
	want := f.emu.URL() + "/api/dcim/devices/?limit=50&offset=50"
	if *first.Next.Get() != want {
		t.Errorf("next = %q, want %q", *first.Next.Get(), want)
	}
	last, _, err := f.client.DcimAPI.DcimDevicesList(ctx).Limit(50).Offset(100).Execute()
	if err != nil {
		t.Fatal(err)
	}
	if len(last.Results) != 21 || last.Next.Get() != nil || *last.Previous.Get() != f.emu.URL()+"/api/dcim/devices/?limit=50&offset=50" {
		t.Errorf("last page: %d results, next %v, previous %v", len(last.Results), last.Next.Get(), last.Previous.Get())
	}
	capped, _, err := f.client.DcimAPI.DcimDevicesList(ctx).Limit(5000).Execute()
	if err != nil {
		t.Fatal(err)
	}
	if len(capped.Results) != 121 {
		t.Errorf("limit 5000 (capped at MAX_PAGE_SIZE 1000) gave %d results", len(capped.Results))
	}
	byID, _, err := f.client.DcimAPI.DcimDevicesList(ctx).Id([]int32{int32(f.dev)}).Status([]string{"planned"}).Execute()
	if err != nil || byID.Count != 1 {
		t.Errorf("filter by id and status: %v, %v", byID, err)
	}
}

func TestGoNetboxDecodesPartialUpdate(t *testing.T) {
	f := newFixture(t)
	p := nb.NewPatchedWritableDeviceWithConfigContextRequest()
	p.CustomFields = map[string]interface{}{"fleet_state": "pending", "desired_action": nil}
	p.SetStatus(nb.DEVICESTATUSVALUE_STAGED)
	d, resp, err := f.client.DcimAPI.DcimDevicesPartialUpdate(context.Background(), int32(f.dev)).
		PatchedWritableDeviceWithConfigContextRequest(*p).Execute()
	if err != nil {
		t.Fatalf("partial update: %v", err)
	}
	if d.Status.GetValue() != nb.DEVICESTATUSVALUE_STAGED || d.CustomFields["fleet_state"] != "pending" ||
		d.CustomFields["fleet_class"] != "talos-cp" || resp.Header.Get("ETag") == "" {
		t.Errorf("after patch: status %s, cf %v, ETag %q", d.Status.GetValue(), d.CustomFields, resp.Header.Get("ETag"))
	}
}

func TestGoNetboxDecodesComponentsAndJournal(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	macs, _, err := f.client.DcimAPI.DcimMacAddressesList(ctx).DeviceId([]int32{int32(f.dev)}).Execute()
	if err != nil {
		t.Fatalf("list MACs: %v", err)
	}
	if macs.Count != 3 || macs.Results[0].MacAddress != "AA:BB:CC:00:11:22" || macs.Results[0].AssignedObjectId.Get() == nil {
		t.Errorf("MACs = %+v", macs.Results)
	}
	ifs, _, err := f.client.DcimAPI.DcimInterfacesList(ctx).DeviceId([]int32{int32(f.dev)}).MgmtOnly(false).Execute()
	if err != nil {
		t.Fatalf("list interfaces: %v", err)
	}
	if ifs.Count != 1 || ifs.Results[0].GetMacAddress() != "AA:BB:CC:00:11:22" || len(ifs.Results[0].MacAddresses) != 2 {
		t.Errorf("interfaces = %+v", ifs.Results)
	}
	ips, _, err := f.client.IpamAPI.IpamIpAddressesList(ctx).DeviceId([]int32{int32(f.dev)}).Execute()
	if err != nil || ips.Count != 1 || ips.Results[0].Address != "10.0.0.21/24" {
		t.Fatalf("list IPs: %v %v", ips, err)
	}

	je := nb.NewWritableJournalEntryRequest("dcim.device", f.dev, "Accepted provision-abc.")
	je.SetKind(nb.JOURNALENTRYKINDVALUE_SUCCESS)
	entry, _, err := f.client.ExtrasAPI.ExtrasJournalEntriesCreate(ctx).WritableJournalEntryRequest(*je).Execute()
	if err != nil {
		t.Fatalf("create journal entry: %v", err)
	}
	if entry.Comments != "Accepted provision-abc." || entry.Kind.GetValue() != nb.JOURNALENTRYKINDVALUE_SUCCESS || entry.CreatedBy.Get() == nil {
		t.Errorf("entry = %+v", entry)
	}
	list, _, err := f.client.ExtrasAPI.ExtrasJournalEntriesList(ctx).AssignedObjectId([]int32{int32(f.dev)}).AssignedObjectType("dcim.device").Execute()
	if err != nil || list.Count != 1 {
		t.Fatalf("list journal: %v, %v", list, err)
	}
	if got := f.emu.Journal(f.dev); len(got) != 1 || got[0].CreatedBy != "fleetd" {
		t.Errorf("Journal = %+v", got)
	}
}

func TestGoNetboxDecodesExtras(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// NetBox 4.6 renders choice_set.choices_count as an integer; go-netbox v4.3.0 (generated
	// from 4.3, where it was a string) cannot decode it. The emulator keeps 4.6's shape, so this
	// pitfall shows here as it would against a real NetBox.
	_, _, err := f.client.ExtrasAPI.ExtrasCustomFieldsList(ctx).Limit(100).Execute()
	if err == nil || !strings.Contains(err.Error(), "choices_count") {
		t.Errorf("custom fields list: err = %v, want go-netbox's choices_count decoding error", err)
	}
	status, _, body := f.do(t, "GET", "/api/extras/custom-fields/?limit=100", bearer(f.fleetd), "")
	var cfs struct {
		Count   int
		Results []struct {
			Name      string
			ChoiceSet *struct {
				ChoicesCount int `json:"choices_count"`
			} `json:"choice_set"`
		}
	}
	if err := json.Unmarshal(body, &cfs); status != 200 || err != nil || cfs.Count != f.cfs {
		t.Fatalf("custom fields: %d %v %s", status, err, body)
	}
	if _, _, err := f.client.ExtrasAPI.ExtrasCustomFieldChoiceSetsList(ctx).Execute(); err == nil || !strings.Contains(err.Error(), "choices_count") {
		t.Errorf("choice sets list: err = %v, want go-netbox's choices_count decoding error", err)
	}
	hooks, _, err := f.client.ExtrasAPI.ExtrasWebhooksList(ctx).Execute()
	if err != nil || hooks.Count != 5 || hooks.Results[0].GetSecret() != testSecret {
		t.Fatalf("webhooks: %v, %v", hooks, err)
	}
	rules, _, err := f.client.ExtrasAPI.ExtrasEventRulesList(ctx).Execute()
	if err != nil || rules.Count != 7 {
		t.Fatalf("event rules: %v, %v", rules, err)
	}
	st, _, err := f.client.StatusAPI.StatusRetrieve(ctx).Execute()
	if err != nil || st["netbox-version"] != "4.6.8" {
		t.Fatalf("status: %v, %v", st, err)
	}
}
