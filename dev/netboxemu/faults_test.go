package netboxemu

import (
	"context"
	"net/http"
	"testing"
	"time"
)

func TestAPIFaults(t *testing.T) {
	f := newFixture(t)
	fired := f.emu.Faults().AddAPI(APIFaultRule{Method: "GET", PathPrefix: "/api/dcim/devices/", After: 1, Times: 2,
		Fault: APIFault{Status: http.StatusServiceUnavailable}})
	want := []int{200, 503, 503, 200}
	for i, w := range want {
		status, _, body := f.do(t, "GET", "/api/dcim/devices/", bearer(f.fleetd), "")
		if status != w {
			t.Errorf("request %d = %d %s, want %d", i+1, status, body, w)
		}
	}
	// Other paths and methods are not counted by the rule.
	if status, _, _ := f.do(t, "GET", "/api/status/", bearer(f.fleetd), ""); status != 200 {
		t.Errorf("status endpoint = %d", status)
	}
	f.emu.Faults().Clear()
	if n := fired(); n != 2 {
		t.Errorf("the rule fired on %d requests, want 2 (the first passed, the fourth came after its window)", n)
	}
	f.emu.Faults().AddAPI(APIFaultRule{PathPrefix: "/api/status/", Fault: APIFault{Delay: time.Hour}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.emu.URL()+"/api/status/", nil)
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Error("a delayed request answered before the client's deadline")
	}
}

func TestDeliveryFaults(t *testing.T) {
	f := newFixture(t)
	dropped := f.emu.Faults().AddDelivery(DeliveryFaultRule{Webhook: "fleetd-provision", Times: 1, Fault: DeliveryFault{Drop: true}})
	delayed := f.emu.Faults().AddDelivery(DeliveryFaultRule{Webhook: "fleetd-provision", After: 1, Times: 1,
		Fault: DeliveryFault{Delay: 10 * time.Millisecond}})
	never := f.emu.Faults().AddDelivery(DeliveryFaultRule{Webhook: "fleetd-wipe", Fault: DeliveryFault{Drop: true}})
	f.patchDevice(t, "Token "+f.admin, `{"custom_fields": {"desired_action": "provision"}}`)
	f.idle(t)
	f.patchDevice(t, "Token "+f.admin, `{}`)
	f.idle(t)
	d := ofRule(f.emu.Deliveries(), "fleetd-provision")
	if len(d) != 2 || !d[0].Dropped || d[0].StatusCode != 0 || d[1].Dropped || !d[1].OK() {
		t.Fatalf("provision deliveries: %d, want the first dropped and the second delivered", len(d))
	}
	if n := len(ofRule(f.emu.Deliveries(), "fleetd-device-changed")); n != 2 {
		t.Errorf("fleetd-device-changed deliveries: %d, want 2 (no rule faulted them)", n)
	}
	if n := len(f.deliveredTo("/v1/netbox/webhook/provision")); n != 1 {
		t.Errorf("receiver got %d, want 1 (the first was dropped)", n)
	}
	if a, b, c := dropped(), delayed(), never(); a != 1 || b != 1 || c != 0 {
		t.Errorf("the rules fired on %d, %d and %d deliveries, want 1, 1 and 0 (no wipe webhook was sent)", a, b, c)
	}
}
