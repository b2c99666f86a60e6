package workflows_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/folly-infra/fleetd/fleet"
)

// counting records the requests made through it while on.
type counting struct {
	mu   sync.Mutex
	on   bool
	seen []string
	next http.RoundTripper
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	if c.on {
		c.seen = append(c.seen, r.Method+" "+r.URL.Path)
	}
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

// together holds a GET of a Hardware until a GET of a Template has started (or a minute has
// passed, which it reports): two reads made one after the other never meet.
type together struct {
	next      http.RoundTripper
	template  chan struct{}
	once      sync.Once
	gaveUp    bool
	hardwareN int
}

func (tg *together) RoundTrip(r *http.Request) (*http.Response, error) {
	switch {
	case r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/templates/"):
		tg.once.Do(func() { close(tg.template) })
	case r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/hardware/"):
		tg.hardwareN++
		select {
		case <-tg.template:
		case <-time.After(time.Minute):
			tg.gaveUp = true
		}
	}
	return tg.next.RoundTrip(r)
}

func (c *counting) take(on bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := c.seen
	c.on, c.seen = on, nil
	return seen
}

// TestInstallRequests counts the Kubernetes API requests a new device's Install makes against the
// real API server, the client's very first included: the Hardware read and the Template read, made
// at once (the Hardware read is held until the Template read has started: a storm's Workflow
// waits for the slower read only), the Hardware create and the Workflow create (no read of the
// Workflow first: AlreadyExists is success), and no discovery (fleetd's client names the tinkerbell.org paths itself: kube.go). The storm of
// 500 provisions is bounded by them and by the client's rate limit (kubernetes.qps,
// kubernetes.burst).
func TestInstallRequests(t *testing.T) {
	ctx := context.Background()
	tg := &together{template: make(chan struct{})}
	c := &counting{next: tg}
	rc := rest.CopyConfig(server.RESTConfig())
	rc.Wrap(func(next http.RoundTripper) http.RoundTripper { tg.next = next; return c })
	e := newEnvOn(t, rc)
	e.template(t, "talos-provision", talosTemplate)
	d := device(43, "node-requests")
	d.MACs = []fleet.MAC{"3c:ec:ef:4c:4f:60"}
	c.take(true)
	if err := e.in.Install(ctx, spec(d, "talos-provision", fleet.ActionProvision, "provision-requests1")); err != nil {
		t.Fatalf("Install: %v", err)
	}
	seen := c.take(false)
	t.Logf("a new device's Install: %d requests:\n%s", len(seen), strings.Join(seen, "\n"))
	ns := "/apis/tinkerbell.org/v1alpha1/namespaces/" + e.ns
	want := []string{
		"GET " + ns + "/hardware/node-requests",
		"GET " + ns + "/templates/talos-provision",
		"POST " + ns + "/hardware",
		"POST " + ns + "/workflows",
	}
	if len(seen) >= 2 { // the two reads are made at once, in either order
		slices.Sort(seen[:2])
	}
	if !slices.Equal(seen, want) {
		t.Errorf("a new device's Install made these Kubernetes API requests:\n%s\nwant these %d (no discovery, no read of the Workflow):\n%s",
			strings.Join(seen, "\n"), len(want), strings.Join(want, "\n"))
	}
	if tg.hardwareN != 1 || tg.gaveUp {
		t.Errorf("%d Hardware reads, held a minute without a Template read: %v; want one, made while the Template was read", tg.hardwareN, tg.gaveUp)
	}
}

// failingWorkflowRead answers every read of one Workflow by name with 503, as an API server
// going away between two requests would; every other request goes through.
type failingWorkflowRead struct{ next http.RoundTripper }

func (f failingWorkflowRead) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/workflows/") {
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
			Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(strings.NewReader("unavailable")),
			Request: r}, nil
	}
	return f.next.RoundTrip(r)
}

// TestInstallRefusedTemplateUnreadWorkflow: a Template that refuses the request sends Install to
// read the Workflow (a request installed before is not refused for what its Template became
// since); when that read fails, Install returns the read's error, not the refusal, so that fleet
// retries the request instead of failing it, and writes nothing.
func TestInstallRefusedTemplateUnreadWorkflow(t *testing.T) {
	ctx := context.Background()
	rc := rest.CopyConfig(server.RESTConfig())
	rc.Wrap(func(next http.RoundTripper) http.RoundTripper { return failingWorkflowRead{next} })
	e := newEnvOn(t, rc)
	// No Template: the request is refused, and the Workflow cannot be read.
	d := device(44, "node-unread")
	err := e.in.Install(ctx, spec(d, "talos-provision", fleet.ActionProvision, "provision-unread1"))
	if err == nil || errors.Is(err, fleet.ErrTemplate) {
		t.Fatalf("Install with a missing Template and an unreadable Workflow: %v, want the read's error, not fleet.ErrTemplate", err)
	}
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("Install: %v, want the API server's 503", err)
	}
	e.wroteNothing(t, "Install")
}
