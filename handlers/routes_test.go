package handlers

import (
	"bufio"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/folly-infra/fleetd/netbox"
)

var docRow = regexp.MustCompile("^\\| (GET|POST|PUT|PATCH|DELETE) \\| `([^`]+)` \\|")

// TestRoutesDocumented keeps docs/http.md and the route table in agreement: the documented routes are a contract.
func TestRoutesDocumented(t *testing.T) {
	f, err := os.Open("../docs/http.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var documented []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := docRow.FindStringSubmatch(sc.Text()); m != nil {
			documented = append(documented, m[1]+" "+m[2])
		}
	}
	var served []string
	for _, r := range append(Table(), ClusterTable()...) {
		served = append(served, r.Method+" "+r.Path)
	}
	sort.Strings(documented)
	sort.Strings(served)
	if diff := cmp.Diff(served, documented); diff != "" {
		t.Errorf("docs/http.md and handlers.Table() disagree (-served +documented):\n%s", diff)
	}
}

// TestWebhookPathsServed keeps netbox-webhooks.yaml and the served routes in agreement: every
// webhook NetBox is told to call is a POST route fleetd serves, and every webhook route fleetd
// serves is called by some webhook.
func TestWebhookPathsServed(t *testing.T) {
	f, err := os.Open("../netbox-webhooks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	schema, err := netbox.LoadSchema(f)
	if err != nil {
		t.Fatalf("netbox-webhooks.yaml: %v", err)
	}
	for _, p := range WebhookPathProblems(schema.WebhookPaths()) {
		t.Errorf("netbox-webhooks.yaml: %s", p)
	}
	// Each way of disagreeing is found.
	paths := append(schema.WebhookPaths()[1:], netbox.WebhookPathPrefix+"/provison")
	got := strings.Join(WebhookPathProblems(paths), "\n")
	for _, want := range []string{"calls " + netbox.WebhookPathPrefix + "/provison, which fleetd does not serve", "no webhook calls " + schema.WebhookPaths()[0]} {
		if !strings.Contains(got, want) {
			t.Errorf("refuse/disagreeing paths: %q does not say %q", got, want)
		}
	}
}
