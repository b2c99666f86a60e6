package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/dev/logcheck"
)

// netboxAddr and strangerAddr are the loopback addresses NetBox's deliveries and another host's
// requests come from in these tests (every 127.0.0.0/8 address is local on Linux).
var (
	netboxAddr   = netip.MustParseAddr("127.0.0.1")
	strangerAddr = netip.MustParseAddr("127.0.0.2")
)

// lineCounter counts the log lines written to it.
type lineCounter struct {
	mu    sync.Mutex
	lines []string
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, string(p))
	return len(p), nil
}

// parseable checks that every line is one JSON object with no key twice (docs/operate.md, "Endpoints":
// the logs an operator's tools read).
func (c *lineCounter) parseable(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	problems, _, err := logcheck.Lines(strings.NewReader(strings.Join(c.lines, "")))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("log %s", p)
	}
}

func (c *lineCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.lines)
}

// served is the intake behind a real HTTP server, with the route table's cap as handlers applies
// it, NetBox's address configured as its source.
func served(t *testing.T, cfg Config, log io.Writer) (*Intake, *httptest.Server) {
	t.Helper()
	cfg.Secret, cfg.ServiceUser = []byte(secret), "fleetd"
	cfg.Sources = []netip.Prefix{netip.PrefixFrom(netboxAddr, 32)}
	in, err := New(cfg, Deps{Reconciler: &recorder{}, Logger: zerolog.New(log), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.MaxBytesHandler(in.Handler("provision"), MaxBody))
	t.Cleanup(srv.Close)
	return in, srv
}

// clientFrom is an HTTP client whose connections come from addr.
func clientFrom(addr netip.Addr) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: addr.AsSlice()}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 64}}
}

// slowBody opens a connection from addr and sends the headers of a webhook at the cap with a
// signature of the right form but the wrong value, then all its body but the last byte, and
// holds the connection until stop is closed.
func slowBody(t *testing.T, srv *httptest.Server, addr netip.Addr, stop <-chan struct{}, wg *sync.WaitGroup) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: addr.AsSlice()}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Error(err)
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/netbox/webhook/provision HTTP/1.1\r\nHost: fleetd\r\nContent-Type: application/json\r\nContent-Length: %d\r\nX-Hook-Signature: %s\r\n\r\n",
			MaxBody, strings.Repeat("0", 128))
		_, _ = conn.Write(bytes.Repeat([]byte("x"), MaxBody-1)) // fails once fleetd refused it and closed
		<-stop
	}()
}

// liveHeap is the heap the last garbage collection found live, after a collection now.
func liveHeap() float64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64())
}

// TestSlowUnsignedBodies: 64 connections from another host each send a webhook at the cap, with a
// signature of the right form, all but its last byte, and hold on. Four take the other hosts'
// read slots and are read as far as they came; the other 60 are refused busy at once, unread.
// While the 64 hold on, a signed delivery from NetBox's address is answered 202 (its pool is
// its own), and the live heap held is under a quarter of the 24 MiB the 64 offered (measured
// against the heap before them, in the same run); when they go away, what they cost in the log is
// a few sampled lines, not a line each. Before, every body was read whole, at once, with no bound
// but the cap, and each refusal wrote its own warning (finding 4: 128 bodies of 1 MiB held 144 MiB).
func TestSlowUnsignedBodies(t *testing.T) {
	var log lineCounter
	in, srv := served(t, Config{BodyTimeout: time.Minute}, &log)
	before := liveHeap()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const slow = 64
	for range slow {
		slowBody(t, srv, strangerAddr, stop, &wg)
	}
	busy := func() float64 { return testutil.ToFloat64(in.results.WithLabelValues("provision", "busy")) }
	for deadline := time.Now().Add(30 * time.Second); busy() < slow-DefaultOtherSlots; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%v of %d slow bodies refused busy, want %d", busy(), slow, slow-DefaultOtherSlots)
		}
	}
	time.Sleep(200 * time.Millisecond) // the four in their slots are read as far as they came
	held := liveHeap() - before
	offered := float64(slow * MaxBody)

	// NetBox's delivery, while they hold on.
	start := time.Now()
	req, _ := http.NewRequest("POST", srv.URL+"/v1/netbox/webhook/provision", strings.NewReader(body46))
	req.Header.Set("X-Hook-Signature", sign([]byte(body46)))
	resp, err := clientFrom(netboxAddr).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	answered := time.Since(start)
	stillHeld := busy() == slow-DefaultOtherSlots && len(in.other.slots) == DefaultOtherSlots
	linesWhileHeld := log.count()
	close(stop)
	wg.Wait()
	for deadline := time.Now().Add(10 * time.Second); len(in.other.slots) > 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}

	t.Logf("64 slow unsigned bodies at the cap (%d KiB) from another host: %.1f MiB of live heap held (%.0f%% of the %.0f MiB offered); NetBox's delivery answered %d in %v while they held on; %d log lines while they held on, %d in all",
		MaxBody>>10, held/(1<<20), 100*held/offered, offered/(1<<20), resp.StatusCode, answered.Round(time.Microsecond), linesWhileHeld, log.count())
	if resp.StatusCode != http.StatusAccepted || !stillHeld {
		t.Errorf("NetBox's delivery answered %d (slow bodies still held: %v), want 202 while they hold on", resp.StatusCode, stillHeld)
	}
	if held > offered/4 {
		t.Errorf("the slow bodies held %.1f MiB of live heap, over a quarter of the %.0f MiB they offered", held/(1<<20), offered/(1<<20))
	}
	if n := log.count(); n >= 20 {
		t.Errorf("%d log lines for %d refused bodies and one delivery, want fewer than 20:\n%s", n, slow, strings.Join(log.lines, ""))
	}
	log.parseable(t)
	if got := testutil.ToFloat64(in.results.WithLabelValues("provision", "busy")) + testutil.ToFloat64(in.results.WithLabelValues("provision", "malformed")); got != slow {
		t.Errorf("fleetd_webhooks_total counts %v of the %d refusals (busy and malformed)", got, slow)
	}
}

// TestNetBoxStormIsNeverRefused: NetBox's deliveries come from one source, at most once each
// (NetBox does not send a refused delivery again): 1,000 of them, 500 at a time, each for its own
// device, all while 64 slow bodies from another host hold their pool, are all answered 202 and
// queued — they wait for a slot of NetBox's pool rather than being refused.
func TestNetBoxStormIsNeverRefused(t *testing.T) {
	var log lineCounter
	in, srv := served(t, Config{BodyTimeout: time.Minute}, &log)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 64 {
		slowBody(t, srv, strangerAddr, stop, &wg)
	}
	defer func() { close(stop); wg.Wait() }()
	const storm, deliveries = 500, 1000
	client := clientFrom(netboxAddr)
	var next, accepted atomic.Int64
	var refused sync.Map
	var senders sync.WaitGroup
	for range storm {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for {
				n := next.Add(1)
				if n > deliveries {
					return
				}
				body := strings.Replace(body46, `"id": 12`, fmt.Sprintf(`"id": %d`, n), 1)
				req, _ := http.NewRequestWithContext(context.Background(), "POST", srv.URL+"/v1/netbox/webhook/provision", strings.NewReader(body))
				req.Header.Set("X-Hook-Signature", sign([]byte(body)))
				resp, err := client.Do(req)
				if err != nil {
					refused.Store(err.Error(), true)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted {
					accepted.Add(1)
				} else {
					refused.Store(fmt.Sprintf("%d %s", resp.StatusCode, b), true)
				}
			}
		}()
	}
	senders.Wait()
	refused.Range(func(k, _ any) bool { t.Errorf("a delivery of NetBox's was refused: %v", k); return true })
	if accepted.Load() != deliveries || len(in.jobs) != deliveries {
		t.Errorf("%d of %d deliveries accepted, %d queued", accepted.Load(), deliveries, len(in.jobs))
	}
}

// TestRefusalLogIsSampled: the refusals of one source and reason write one line per interval,
// which counts the refusals it stands for; another source or another reason has its own line;
// the table of sources stays bounded, the sources beyond it sharing one line per reason.
func TestRefusalLogIsSampled(t *testing.T) {
	var log lineCounter
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	l := &refusalLog{log: zerolog.New(&log), now: func() time.Time { return now }, every: time.Minute, seen: map[refusalKey]*refusalCount{}}
	ev := zerolog.New(&log)
	a, b := netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("2001:db8::1")
	for range 1000 {
		l.refused(&ev, a, "bad_signature", "x")
	}
	l.refused(&ev, a, "busy", "x")
	l.refused(&ev, b, "bad_signature", "x")
	l.refused(&ev, netip.MustParseAddr("2001:db8::2"), "bad_signature", "x") // the same /64
	if n := log.count(); n != 3 {
		t.Fatalf("%d lines for 1,000 refusals of one source and reason, one of another reason and two of another /64; want 3:\n%s", n, log.lines)
	}
	now = now.Add(time.Minute)
	l.refused(&ev, a, "bad_signature", "x")
	if n := log.count(); n != 4 || !strings.Contains(log.lines[3], `"refusals":1000`) || !strings.Contains(log.lines[3], `"source":"10.0.0.7"`) {
		t.Errorf("the next interval's line: %q, want it to count the 999 refusals since the last line and this one", log.lines[len(log.lines)-1])
	}
	if !strings.Contains(log.lines[2], `"source":"2001:db8::/64"`) {
		t.Errorf("an IPv6 source is logged as its /64: %q", log.lines[2])
	}
	for i := range 3 * maxRefusalSources {
		l.refused(&ev, netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), "busy", "x")
	}
	if len(l.seen) > maxRefusalSources+4 {
		t.Errorf("the table holds %d sources, want at most %d and the shared ones", len(l.seen), maxRefusalSources)
	}
	if n := log.count(); n > 4+maxRefusalSources+1 {
		t.Errorf("%d lines for %d sources beyond the table's room, want one line for those it cannot hold", n-4, 3*maxRefusalSources)
	}
}

// TestSignedFloodIsBounded: anyone who may view webhooks in NetBox can read the secret and sign,
// so signed traffic is bounded too. 2,000 signed events for 2,000 devices from another host, 64
// at a time, against a queue of 8: the queue holds 8 events and no more (each costs a worker's
// re-read later), the others are refused queue_full, or busy while the other hosts' 4 slots are
// taken, every refusal counted and the log a few sampled lines. 2,000 signed events for one
// device cost one place in the queue (coalesced).
func TestSignedFloodIsBounded(t *testing.T) {
	var log lineCounter
	in, srv := served(t, Config{Queue: 8}, &log)
	client := clientFrom(strangerAddr)
	flood := func(device func(n int64) int64) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := next.Add(1); n <= 2000; n = next.Add(1) {
					body := strings.Replace(body46, `"id": 12`, fmt.Sprintf(`"id": %d`, device(n)), 1)
					req, _ := http.NewRequest("POST", srv.URL+"/v1/netbox/webhook/provision", strings.NewReader(body))
					req.Header.Set("X-Hook-Signature", sign([]byte(body)))
					if resp, err := client.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			}()
		}
		wg.Wait()
	}
	count := func(o string) float64 { return testutil.ToFloat64(in.results.WithLabelValues("provision", o)) }

	flood(func(int64) int64 { return 77 })
	if len(in.jobs) != 1 || count("accepted") != 1 || count("coalesced")+count("busy") != 1999 {
		t.Errorf("2,000 signed events for one device: %d queued, %v accepted, %v coalesced, %v busy; want 1 queued and the rest coalesced or busy",
			len(in.jobs), count("accepted"), count("coalesced"), count("busy"))
	}
	for len(in.jobs) > 0 {
		in.do(context.Background(), <-in.jobs)
	}
	flood(func(n int64) int64 { return 1000 + n })
	refused := count("queue_full") + count("busy")
	t.Logf("2,000 signed events for 2,000 devices: %d queued, %v refused queue_full, %v busy; %d log lines", len(in.jobs), count("queue_full"), count("busy"), log.count())
	if len(in.jobs) != 8 || count("accepted") != 1+8 || refused < 2000-8 {
		t.Errorf("%d queued, %v accepted, %v refused; want the queue's 8 and the rest refused", len(in.jobs), count("accepted")-1, refused)
	}
	if n := log.count(); n >= 20 {
		t.Errorf("%d log lines for the refusals of two floods, want a few sampled lines", n)
	}
	log.parseable(t)
}

// TestNetBoxDeliveryWaitsForASlot: a delivery from NetBox's address that finds every slot of
// NetBox's pool taken waits for one (Config.NetBoxWait) and is answered 202 when one frees, here
// when the body holding the only slot runs past its BodyTimeout; the storm test's deliveries are
// read too quickly to ever find the pool full. A delivery that waits past NetBoxWait, or whose
// sender goes away, is refused busy, and so is another host's body at once when its pool is full.
func TestNetBoxDeliveryWaitsForASlot(t *testing.T) {
	deliver := func(t *testing.T, srv *httptest.Server, from netip.Addr) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/v1/netbox/webhook/provision", strings.NewReader(body46))
		req.Header.Set("X-Hook-Signature", sign([]byte(body46)))
		resp, err := clientFrom(from).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// hold has a slow body from addr take the only slot of its pool and returns once it holds it.
	hold := func(t *testing.T, in *Intake, srv *httptest.Server, addr netip.Addr, p *pool) {
		t.Helper()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		slowBody(t, srv, addr, stop, &wg)
		t.Cleanup(func() { close(stop); wg.Wait() })
		for deadline := time.Now().Add(30 * time.Second); len(p.slots) < cap(p.slots); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the slow body never took its pool's slot")
			}
		}
	}

	t.Run("ok/NetBox's delivery waits for the slot a slow body frees", func(t *testing.T) {
		var log lineCounter
		in, srv := served(t, Config{NetBoxSlots: 1, BodyTimeout: 300 * time.Millisecond}, &log)
		hold(t, in, srv, netboxAddr, in.netbox)
		if code, body := deliver(t, srv, netboxAddr); code != http.StatusAccepted || len(in.jobs) != 1 {
			t.Errorf("answered %d %s with %d queued; want 202, queued once the slow body's slot was free", code, body, len(in.jobs))
		}
		if busy := testutil.ToFloat64(in.results.WithLabelValues("provision", "busy")); busy != 0 {
			t.Errorf("%v deliveries refused busy, want none", busy)
		}
	})
	t.Run("refuse/NetBox's delivery that waited past NetBoxWait is busy", func(t *testing.T) {
		var log lineCounter
		in, srv := served(t, Config{NetBoxSlots: 1, BodyTimeout: time.Minute, NetBoxWait: 50 * time.Millisecond}, &log)
		hold(t, in, srv, netboxAddr, in.netbox)
		if code, body := deliver(t, srv, netboxAddr); code != http.StatusServiceUnavailable || !strings.Contains(body, "busy") || len(in.jobs) != 0 {
			t.Errorf("answered %d %s with %d queued; want 503 busy, nothing queued", code, body, len(in.jobs))
		}
	})
	t.Run("refuse/another host's body finds its pool full: busy at once", func(t *testing.T) {
		var log lineCounter
		in, srv := served(t, Config{OtherSlots: 1, BodyTimeout: time.Minute}, &log)
		hold(t, in, srv, strangerAddr, in.other)
		if code, body := deliver(t, srv, strangerAddr); code != http.StatusServiceUnavailable || !strings.Contains(body, "busy") || len(in.jobs) != 0 {
			t.Errorf("answered %d %s with %d queued; want 503 busy, nothing queued", code, body, len(in.jobs))
		}
	})
	t.Run("refuse/a waiter whose request ends gets no slot", func(t *testing.T) {
		p := newPool("netbox", 1, time.Hour)
		if !p.acquire(context.Background()) {
			t.Fatal("an empty pool refused a slot")
		}
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan bool)
		go func() { got <- p.acquire(ctx) }()
		cancel()
		if <-got {
			t.Error("a waiter whose context ended took a slot that was never freed")
		}
		p.release()
		if !p.acquire(context.Background()) {
			t.Error("the freed slot was not free")
		}
	})
}

// TestRefusalLogMakesRoom: a full table drops the entries whose last line is an interval old and
// that have nothing left to report, from the interval's very end, to make room for a new source;
// an entry with refusals not yet logged is kept, and its next line counts them. While no entry
// can go, a new source shares the line of the sources beyond the table's room.
func TestRefusalLogMakesRoom(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	src := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}) }
	newcomer := netip.MustParseAddr("10.9.9.9")
	// full is a table of maxRefusalSources sources each logged at t0, the first with one refusal
	// since its line.
	full := func() (*refusalLog, *lineCounter, *time.Time) {
		log := &lineCounter{}
		now := t0
		l := &refusalLog{log: zerolog.New(log), now: func() time.Time { return now }, every: time.Minute, seen: map[refusalKey]*refusalCount{}}
		ev := zerolog.New(log)
		for i := range maxRefusalSources {
			l.refused(&ev, src(i), "busy", "x")
		}
		l.refused(&ev, src(0), "busy", "x")
		if n := log.count(); n != maxRefusalSources || len(l.seen) != maxRefusalSources {
			t.Fatalf("%d lines and %d entries for %d sources, want one each", n, len(l.seen), maxRefusalSources)
		}
		return l, log, &now
	}
	last := func(log *lineCounter) (source string, refusals int) {
		var line struct {
			Source   string `json:"source"`
			Refusals int    `json:"refusals"`
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if err := json.Unmarshal([]byte(log.lines[len(log.lines)-1]), &line); err != nil {
			t.Fatal(err)
		}
		return line.Source, line.Refusals
	}

	t.Run("refuse/no room within the interval: the newcomer shares the line of those beyond it", func(t *testing.T) {
		l, log, now := full()
		*now = t0.Add(time.Minute - time.Nanosecond)
		ev := zerolog.New(log)
		l.refused(&ev, newcomer, "busy", "x")
		if source, _ := last(log); source != "other" || len(l.seen) != maxRefusalSources+1 {
			t.Errorf("the newcomer's line names %q with %d entries; want \"other\", the table and the shared entry (%d)", source, len(l.seen), maxRefusalSources+1)
		}
	})
	t.Run("ok/at the interval's end the table makes room, and keeps what it has not logged", func(t *testing.T) {
		l, log, now := full()
		*now = t0.Add(time.Minute)
		ev := zerolog.New(log)
		l.refused(&ev, newcomer, "busy", "x")
		if source, _ := last(log); source != "10.9.9.9" {
			t.Errorf("the newcomer's line names %q, want its own source 10.9.9.9", source)
		}
		if len(l.seen) != 2 {
			t.Errorf("%d entries after the sweep, want 2 (the source with a refusal to report, and the newcomer)", len(l.seen))
		}
		l.refused(&ev, src(0), "busy", "x")
		if source, n := last(log); source != "10.1.0.0" || n != 2 {
			t.Errorf("the kept source's next line: %q with %d refusals, want 10.1.0.0 with 2 (the one not logged at t0, and this one)", source, n)
		}
	})
}
