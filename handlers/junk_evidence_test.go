package handlers_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/dev/fakehw"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// recordEvidence keeps the body of the last evidence request that reached fleetd.
type recordEvidence struct {
	mu   sync.Mutex
	body []byte
}

func (r *recordEvidence) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == api.PathAttestEvidence && req.Header.Get("X-Junk") == "" {
			b, _ := io.ReadAll(req.Body)
			r.mu.Lock()
			r.body = b
			r.mu.Unlock()
			req.Body = io.NopCloser(bytes.NewReader(b))
		}
		h.ServeHTTP(w, req)
	})
}

// allocated is the bytes the process has allocated on the heap so far.
func allocated() float64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64())
}

// liveHeap is the heap the last garbage collection found live, after a collection now.
func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestJunkEvidenceCostsNothing: 1,000 evidence posts with a junk token at one device, 64 at a
// time, each a real evidence body padded to 512 KiB, while the device's real machine enrolls
// through the real agent on the TPM simulator, with NetBox answering each read after 10 ms. Every
// junk post is refused token_invalid before fleetd reads NetBox or takes the device's lock: the
// flood adds no NetBox read to the enrollment's, which succeeds; the live heap the flood holds
// (sampled after a collection every 20 ms) stays under a quarter of the heap the test process
// held before it, measured in the same run. Before the token came first, every junk post read
// the device twice, once under its lock, and held its decoded body while it queued there
// (docs/security.md, "Transport and abuse").
func TestJunkEvidenceCostsNothing(t *testing.T) {
	sim, ch := simulatorBoot(t)
	defer sim.Close()
	d := fleettest.Declared(12, "node-a")
	d.Declared.EKHashes = []string{simulatorEK(t, ch)}
	d.Owned = fleet.Owned{State: fleet.StatePending, Request: "provision-k3f9x2mq", Workflow: "node-a-provision-k3f9x2mq"}
	rec := &recordEvidence{}
	f := handlerstest.New(t, handlerstest.Config{Catalog: catalog(fleet.SecureBootRequired), Devices: []fleet.Device{d}, Wrap: rec.wrap})
	f.Inv.ReadLatency.Store(int64(10 * time.Millisecond))
	disk := fakehw.Disk{Dev: "nvme0n1", Serial: "S4EWNX0R123456", Model: "Samsung_SSD_980_1TB", Bus: "nvme"}
	sysRoot, devRoot, err := fakehw.Write(t.TempDir(), fakehw.Machine{UUID: machineUUID, Serial: "SN-1", TPMMajor: "2", Disks: []fakehw.Disk{disk}})
	if err != nil {
		t.Fatal(err)
	}
	// enroll runs the real machine's enrollment and returns how long it took, the NetBox calls it
	// made and the bytes allocated meanwhile.
	enroll := func() (time.Duration, int64, float64) {
		t.Helper()
		f.Inv.Set(d) // pending again
		cfg := agent.EnrollConfig{Conn: agent.Conn{FleetdURL: f.URL, RetryWait: time.Millisecond}, Device: "node-a", Request: d.Owned.Request,
			Channel: ch, SysRoot: sysRoot, DevRoot: devRoot, WorkflowDir: t.TempDir(), MAC: "52:54:00:12:34:56", Log: zerolog.Nop()}
		calls, allocs, start := f.Inv.Calls.Load(), allocated(), time.Now()
		if err := agent.Enroll(context.Background(), cfg); err != nil {
			t.Fatalf("the real enrollment: exit %d: %v", agent.ExitCode(err), err)
		}
		took := time.Since(start)
		if got := f.Inv.Get(12); got.Owned.State != fleet.StateInstalling {
			t.Fatalf("after the real enrollment fleet_state %s, want installing", got.Owned.State)
		}
		return took, f.Inv.Calls.Load() - calls, allocated() - allocs
	}

	// Baseline, in this run: the enrollment alone.
	alone, reads, enrollAllocs := enroll()
	junk := junkEvidence(t, rec.body)

	// The junk, with the real enrollment in the middle of it.
	var during time.Duration
	var duringReads int64
	floodAllocs := allocated()
	held, answered := flood(t, func() { during, duringReads, _ = enroll() }, func() *http.Request {
		req, _ := http.NewRequest("POST", f.URL+api.PathAttestEvidence, bytes.NewReader(junk))
		req.Header.Set("X-Junk", "1")
		return req
	}, func(resp *http.Response, err error) bool {
		if err != nil {
			// fleetd answered and closed the connection while the client still sent the body it
			// does not read: the client may see the reset before the answer.
			return errors.Is(err, syscall.ECONNRESET)
		}
		var e api.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode == http.StatusBadRequest && e.Code == "token_invalid"
	})
	perPost := (allocated() - floodAllocs - enrollAllocs) / floodRequests
	offered := float64(floodWorkers * len(junk)) // the junk bytes in flight at once

	t.Logf("real enrollment alone %v, during 1,000 junk posts of %d KiB, 64 at a time, %v (%+v); live heap held by the flood at most %.1f MiB (%.0f%% of the %.0f MiB in flight); allocated %.1f KiB per junk post, client's included (%.1f%% of its body)",
		alone.Round(time.Millisecond), len(junk)>>10, during.Round(time.Millisecond), (during - alone).Round(time.Millisecond),
		held/(1<<20), 100*held/offered, offered/(1<<20), perPost/(1<<10), 100*perPost/float64(len(junk)))
	if answered != floodRequests {
		t.Errorf("%d of %d junk posts refused 400 token_invalid (or reset while their body was sent)", answered, floodRequests)
	}
	if duringReads != reads {
		t.Errorf("NetBox calls while the junk flood ran: %d, the enrollment alone makes %d: junk posts read NetBox", duringReads, reads)
	}
	if perPost > float64(len(junk))/8 {
		t.Errorf("a junk post allocated %.1f KiB, over an eighth of its %d KiB body: fleetd reads what it sends before refusing it", perPost/(1<<10), len(junk)>>10)
	}
	if held > offered/4 {
		t.Errorf("the junk flood held %.1f MiB of live heap, over a quarter of the %.0f MiB it had in flight", held/(1<<20), offered/(1<<20))
	}
	if got := counterWith(t, f, "fleetd_enrollments_total", map[string]string{"step": "evidence", "outcome": "token_invalid"}); got != floodRequests {
		t.Errorf("fleetd_enrollments_total{step=evidence,outcome=token_invalid} = %v, want %d", got, floodRequests)
	}
}

const floodRequests, floodWorkers = 1000, 64

// flood sends floodRequests requests made by newReq, floodWorkers at a time, runs during (when
// set) once the flood is under way, and returns the most live heap it held above the heap live
// before it (sampled after a collection every 20 ms) and how many answers (or transport errors)
// ok accepted.
func flood(t *testing.T, during func(), newReq func() *http.Request, ok func(*http.Response, error) bool) (held float64, answered int64) {
	t.Helper()
	before := liveHeap()
	var peak atomic.Uint64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				if h := liveHeap(); h > peak.Load() {
					peak.Store(h)
				}
			}
		}
	}()
	var next, good atomic.Int64
	var other sync.Map // an answer ok refused, or a transport error: for the failure message
	var wg sync.WaitGroup
	for range floodWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= floodRequests {
				req := newReq()
				req.Close = true // a connection per request for both floods: the junk's is closed after its refusal
				resp, err := http.DefaultClient.Do(req)
				switch {
				case ok(resp, err):
					good.Add(1)
				case err != nil:
					other.Store(err.Error(), true)
				default:
					other.Store(resp.Status, true)
				}
				if err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	if during != nil {
		time.Sleep(50 * time.Millisecond) // the flood is under way
		during()
	}
	wg.Wait()
	close(stop)
	<-sampled
	other.Range(func(k, _ any) bool { t.Logf("a flood request was answered: %v", k); return true })
	return max(0, float64(peak.Load())-float64(before)), good.Load()
}

// junkEvidence is a real evidence body with another token, of the same length, that fleetd
// never sealed, and an event log padded to 1 MiB (the body is 1.4 MiB of the route's 2 MiB).
func junkEvidence(t *testing.T, real []byte) []byte {
	t.Helper()
	var req api.EvidenceRequest
	if err := json.Unmarshal(real, &req); err != nil {
		t.Fatalf("the recorded evidence: %v", err)
	}
	raw := make([]byte, base64.RawURLEncoding.DecodedLen(len(req.Token)))
	_, _ = rand.Read(raw)
	req.Token = base64.RawURLEncoding.EncodeToString(raw)
	req.Platform.EventLog = append(req.Platform.EventLog, make([]byte, 1<<20-len(req.Platform.EventLog))...)
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// counterWith sums the samples of a counter in the service's registry whose labels include want.
func counterWith(t *testing.T, f *handlerstest.Fleetd, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := f.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestEvidenceTokenFirst: an evidence body must begin with its device and token (fleetd's agent
// sends them first), and the token is judged before anything else of the body is read or any
// device looked up: each refusal below is answered without a NetBox call, and one whose body is
// left unread closes the connection (Connection: close) rather than read on.
func TestEvidenceTokenFirst(t *testing.T) {
	f := handlerstest.New(t, handlerstest.Config{Devices: []fleet.Device{fleettest.Declared(12, "node-a")}})
	now := time.Now()
	seal := func(device string, id int64, at time.Time) string {
		s, err := attest.NewTokenSealer(attest.TokenConfig{Key: make([]byte, attest.TokenKeySize), Lifetime: time.Minute,
			Rand: rand.Reader, Now: func() time.Time { return at }})
		if err != nil {
			t.Fatal(err)
		}
		tok, err := s.Seal(attest.TokenClaims{DeviceID: id, Device: device, Request: "provision-k3f9x2mq"})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good := seal("node-a", 12, now)
	rows := []struct {
		name, body string
		code       string // the answer's error
		netbox     bool   // the request got as far as NetBox
	}{
		{"refuse/a junk token", `{"device": "node-a", "token": "AQID", "secret": "AA=="}`, "token_invalid", false},
		{"refuse/a token fleetd did not make", `{"device": "node-a", "token": "` + strings.Repeat("A", 200) + `"}`, "token_invalid", false},
		{"refuse/an expired token", `{"device": "node-a", "token": "` + seal("node-a", 12, now.Add(-2*time.Minute)) + `"}`, "token_expired", false},
		{"refuse/a token sealed for another device", `{"device": "node-a", "token": "` + seal("node-b", 13, now) + `"}`, "token_mismatch", false},
		{"refuse/the token after another member", `{"device": "node-a", "secret": "AA==", "token": "` + good + `"}`, "malformed", false},
		{"refuse/no token within the first 8 KiB", `{"device": "` + strings.Repeat("x", 9<<10) + `", "token": "` + good + `"}`, "malformed", false},
		{"refuse/the device twice", `{"device": "node-a", "device": "node-a", "token": "` + good + `"}`, "malformed", false},
		{"refuse/a token that is not a string", `{"device": "node-a", "token": 7}`, "malformed", false},
		{"refuse/not an object", `["node-a", "` + good + `"]`, "malformed", false},
		// A token that opens lets the body be read and decoded strictly, then decided.
		{"ok/token then device: read on, and refused only for what the rest is", `{"token": "` + good + `", "device": "node-a", "colour": "red"}`, "malformed", false},
		{"ok/device then token: read on and decided (node-a has no request)", `{"device": "node-a", "token": "` + good + `", "platform": {}}`, "no_request", true},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			calls := f.Inv.Calls.Load()
			resp, err := http.Post(f.URL+api.PathAttestEvidence, "application/json", strings.NewReader(r.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e api.Error
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Code != r.code {
				t.Errorf("%d %+v (%v), want error %s", resp.StatusCode, e, err, r.code)
			}
			if read := f.Inv.Calls.Load() != calls; read != r.netbox {
				t.Errorf("NetBox read: %v, want %v", read, r.netbox)
			}
			if unread := resp.Close; unread != strings.HasPrefix(r.name, "refuse/") {
				t.Errorf("connection closed after the answer: %v, want it closed for a body refused unread", unread)
			}
		})
	}
}
