package handlers_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// activeNode is an active node of the fleet whose last boot check was at last.
func activeNode(id int64, last time.Time, outcome fleet.BootCheck) fleet.Device {
	d := fleettest.Declared(id, fmt.Sprintf("secret-name-%03d", id))
	d.Status = fleet.StatusActive
	d.Owned = fleet.Owned{State: fleet.StateActive, BootCheck: outcome, LastBootCheck: last, BootBaseline: "fleetd-baseline/1"}
	return d
}

// scrape GETs a metrics path with the bearer token (none when empty) and returns the status and
// the body.
func scrape(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var sampleLine = regexp.MustCompile(`^([a-z_:]+)(\{[^}]*\})? `)

// seriesOf is the name and labels of every sample line of a text exposition.
func seriesOf(body string) []string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if m := sampleLine.FindStringSubmatch(line); m != nil {
			out = append(out, m[1]+m[2])
		}
	}
	slices.Sort(out)
	return out
}

// TestMetricsNameNoDevice: an unauthenticated scrape of /metrics names no device, and its series
// are the same with 3 active nodes as with 40 (its labels do not grow with the fleet); the
// nodes are counted there by class and outcome, and those that need attention by reason. The
// per-device series are at /metrics/devices, for the metrics token only: not without a token,
// not with another, not with the operator's. Before, /metrics served every device's series by
// name to anyone (finding 8).
func TestMetricsNameNoDevice(t *testing.T) {
	now := time.Now()
	f := handlerstest.New(t, handlerstest.Config{Devices: []fleet.Device{
		activeNode(1, now.Add(-time.Hour), fleet.BootCheckOK), activeNode(2, now.Add(-3*time.Hour), fleet.BootCheckOK),
		activeNode(3, now.Add(-time.Hour), fleet.BootCheckDrift)}})
	reconcile := func() {
		t.Helper()
		if _, err := f.Service.Requests.ReconcileAll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()
	code, small := scrape(t, f.URL+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{`fleetd_active_nodes{boot_check="ok",class="talos-worker"} 2`, `fleetd_active_nodes{boot_check="drift",class="talos-worker"} 1`,
		`fleetd_nodes_attention{class="talos-worker",reason="boot_check_missing"} 1`} {
		if !strings.Contains(small, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for id := int64(4); id <= 40; id++ {
		f.Inv.Set(activeNode(id, now.Add(-time.Duration(id)*time.Minute), fleet.BootCheckOK))
	}
	reconcile()
	_, large := scrape(t, f.URL+"/metrics", "")
	for _, body := range []string{small, large} {
		if strings.Contains(body, "secret-name-") || strings.Contains(body, `device="`) {
			t.Fatalf("an unauthenticated /metrics names a device:\n%s", grepLines(body, "secret-name-"))
		}
	}
	if a, b := seriesOf(small), seriesOf(large); !slices.Equal(a, b) {
		t.Errorf("/metrics has %d series with 3 nodes and %d with 40: its labels grow with the fleet", len(a), len(b))
	}
	if !strings.Contains(large, `fleetd_active_nodes{boot_check="ok",class="talos-worker"} 39`) {
		t.Errorf("/metrics does not count the 39 nodes whose last check was ok:\n%s", grepLines(large, "fleetd_active_nodes"))
	}

	for _, r := range []struct {
		name, token string
		want        int
	}{{"refuse/no token", "", 401}, {"refuse/another token", "guess", 401}, {"refuse/the operator's token", "op", 401}, {"ok/the metrics token", "metrics", 200}} {
		code, body := scrape(t, f.URL+"/metrics/devices", r.token)
		if code != r.want || strings.Contains(body, "secret-name-001") != (r.want == 200) {
			t.Errorf("%s: /metrics/devices answered %d naming node 1: %v; want %d", r.name, code, strings.Contains(body, "secret-name-001"), r.want)
		}
		if r.want == 200 && !strings.Contains(body, `fleetd_device_boot_check_status{class="talos-worker",device="secret-name-040",outcome="ok"} 1`) {
			t.Errorf("%s: the per-device series lack node 40:\n%s", r.name, grepLines(body, "secret-name-040"))
		}
	}
}

func grepLines(body, s string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
