package opentofu_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/dev/stack"
)

// schemaLists are the endpoints of the objects the root manages.
var schemaLists = []string{"custom-field-choice-sets", "custom-fields", "webhooks", "event-rules"}

// list reads every object of an extras endpoint.
func list(t *testing.T, target stack.SchemaTarget, path string) []map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, target.NetBoxURL+"/api/extras/"+path+"/?limit=0", nil)
	req.Header.Set("Authorization", "Token "+target.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return page.Results
}

// comparable drops what differs between two NetBoxes holding the same configuration (ids,
// URLs, times) and names related objects instead of numbering them. Conditions are compared as
// stored: tofu and the emulator's LoadSchema both send the file's.
func comparable(objs []map[string]any) []map[string]any {
	for _, o := range objs {
		for _, k := range []string{"id", "url", "display_url", "created", "last_updated", "action_object_id"} {
			delete(o, k)
		}
		for _, k := range []string{"choice_set", "action_object"} {
			if rel, ok := o[k].(map[string]any); ok {
				o[k] = rel["name"]
			}
		}
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i]["name"].(string) < objs[j]["name"].(string) })
	return objs
}

// sameAsLoadSchema: what tofu made is, field for field, what the emulator's LoadSchema (the
// stack's usual configuration) makes of the same file, payload URLs and secret.
func sameAsLoadSchema(t *testing.T, emu *netboxemu.Emulator, target stack.SchemaTarget) {
	t.Helper()
	raw, err := os.ReadFile(target.File)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := netboxemu.Start(netboxemu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	tok, _ := ref.AddToken(netboxemu.TokenSpec{User: "admin"})
	if err := ref.LoadSchema(raw, target.FleetdURL, target.WebhookSecret); err != nil {
		t.Fatal(err)
	}
	want := stack.SchemaTarget{NetBoxURL: ref.URL(), Token: tok}
	for _, path := range schemaLists {
		got, exp := comparable(list(t, target, path)), comparable(list(t, want, path))
		if len(got) == 0 {
			t.Errorf("tofu created no %s", path)
		}
		if diff := cmp.Diff(exp, got); diff != "" {
			t.Errorf("%s made by tofu differ from LoadSchema's (-LoadSchema +tofu):\n%s", path, diff)
		}
	}
}

// provision asks for a provision of a device as the owner and returns the webhook NetBox sent.
func provision(t *testing.T, ctx context.Context, s *stack.Stack, id int64) netboxemu.Delivery {
	t.Helper()
	if _, err := s.Owner().Patch(ctx, id, map[string]any{"custom_fields": map[string]any{"desired_action": "provision"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, d := range s.NetBox().Deliveries() {
			if d.Webhook == "fleetd-provision" && d.ObjectID == id {
				return d
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no provision webhook for device %d within a minute", id)
	return netboxemu.Delivery{}
}

// declared returns the ids of the stack's validly declared devices.
func declared(s *stack.Stack) []int64 {
	var out []int64
	for _, d := range s.Info().Devices {
		if d.Faulty == "" {
			out = append(out, d.ID)
		}
	}
	return out
}

// fleetdVerifies: a device change is delivered signed with the secret tofu set, and fleetd
// verifies it and takes the request.
func fleetdVerifies(t *testing.T, ctx context.Context, s *stack.Stack, target stack.SchemaTarget) {
	t.Helper()
	d := provision(t, ctx, s, declared(s)[0])
	if got := d.Header.Get("X-Hook-Signature"); got != netboxemu.Sign(target.WebhookSecret, d.Body) {
		t.Errorf("X-Hook-Signature %q is not HMAC-SHA512 of the body with the secret tofu set", got)
	}
	if !d.OK() {
		t.Fatalf("fleetd answered the provision webhook %d %s, want 2xx (verified and taken)", d.StatusCode, d.Err)
	}
}

// fleetdRefusesOtherSecret: once the webhook's secret is not fleetd's, fleetd refuses the
// delivery (401): the acceptance above rested on the secret tofu set.
func fleetdRefusesOtherSecret(t *testing.T, ctx context.Context, s *stack.Stack, target stack.SchemaTarget) {
	t.Helper()
	var id float64
	for _, w := range list(t, target, "webhooks") {
		if w["name"] == "fleetd-provision" {
			id, _ = w["id"].(float64)
		}
	}
	body := `{"secret": "` + strings.Repeat("x", 40) + `"}`
	req, _ := http.NewRequest(http.MethodPatch, target.NetBoxURL+"/api/extras/webhooks/"+jsonInt(id)+"/", strings.NewReader(body))
	req.Header.Set("Authorization", "Token "+target.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PATCH the webhook's secret: %v %v", err, resp)
	}
	resp.Body.Close()
	if d := provision(t, ctx, s, declared(s)[1]); d.StatusCode != http.StatusUnauthorized {
		t.Errorf("fleetd answered a webhook signed with another secret %d, want 401", d.StatusCode)
	}
}

func jsonInt(f float64) string {
	b, _ := json.Marshal(int64(f))
	return string(b)
}
