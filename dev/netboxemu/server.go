// Package netboxemu is an in-memory stand-in for NetBox 4.6.8's REST API and webhook delivery,
// for fleetd's development stack and tests (docs/design.md §8). It is not part of the production binary.
//
// It follows NetBox 4.6.8's observable behaviour as its source has it (README.md names the
// files): the JSON shapes of the serializers fleetd reads, per-key custom-field merge on PATCH,
// NetBox's validation messages, ETag/If-Match/412, token auth (v1 and v2), and webhooks fired by
// event rules with conditions, signed with HMAC-SHA512 over a body written like Python's
// json.dumps. README.md lists what it leaves out. Nothing here is hardened: it trusts its
// callers, listens on loopback, and keeps secrets in memory in plaintext like NetBox does.
package netboxemu

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Version is the NetBox release whose behaviour the emulator follows.
const Version = "4.6.8"

// apiVersion is the API-Version header NetBox sends (major.minor).
const apiVersion = "4.6"

// Config configures an Emulator. The zero value works: wall clock, crypto/rand, 4 delivery
// workers, 10 s delivery timeout, the built-in fault schedule.
type Config struct {
	// Addr is where Start listens; default "127.0.0.1:0" (a free loopback port).
	Addr string
	// Clock returns the current time (created/last_updated, ETags, webhook timestamps).
	Clock func() time.Time
	// Rand is the randomness for request ids and generated tokens.
	Rand io.Reader
	// Logger receives one line per delivery and per injected fault.
	Logger zerolog.Logger
	// Workers is the number of webhook delivery workers (deliveries are unordered across them).
	Workers int
	// DeliveryTimeout bounds one webhook request. NetBox 4.6 has none (RQ_DEFAULT_TIMEOUT, 300 s,
	// bounds the job); a test stack wants a short one.
	DeliveryTimeout time.Duration
	// HTTPClient sends webhooks; default a client with DeliveryTimeout that follows redirects.
	HTTPClient *http.Client
	// Faults decides which requests and deliveries fail; default the built-in *Faults schedule
	// returned by Emulator.Faults.
	Faults FaultHook
	// Latency is added to every API request before it is handled, as a real NetBox takes tens of
	// milliseconds to answer a device read or write (Django, the serializers, PostgreSQL). It is
	// spent outside the emulator's lock, so concurrent requests overlap as they do on a NetBox
	// with several workers; 0 (the default) answers at once.
	Latency time.Duration
	// LatencyObjects, when set with Latency, scales Latency with a list's page, as NetBox's time
	// to answer grows with the objects it serializes: a page of n objects takes Latency ×
	// n/LatencyObjects in all when that is more than Latency (with 50, NetBox's default page
	// size, a page of 1,000 devices takes 20 × Latency). The part beyond Latency is spent after
	// the page is rendered, outside the emulator's lock.
	LatencyObjects int
}

// Emulator is one emulated NetBox. Its methods are safe for concurrent use.
type Emulator struct {
	cfg    Config
	faults *Faults
	mux    *http.ServeMux

	mu sync.Mutex // guards db, ix and the change log
	db *db
	ix *index // set while a list is rendered

	changes   []*objectChange // every save through the API (changelog.go), since the last prune
	changeSeq int64
	pruned    int64 // the sequence number of the last record PruneChangelog deleted (0: none)
	// changesOf is where each object's changes are in changes (by object id, oldest first), so a
	// list of one object's changes does not scan the whole log (changelog.go).
	changesOf map[int][]int

	deliveries *deliverer
	resources  map[string]*resource                            // by object type (routes)
	sleep      func(ctx context.Context, d time.Duration) bool // Config.Latency's wait (tests replace it)
	requests   requestCounts                                   // the API requests served, by route (RequestCounts)

	srv *http.Server
	url string
}

// New makes an emulator that is not listening yet; serve Handler() yourself or call Start.
func New(cfg Config) *Emulator {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.DeliveryTimeout <= 0 {
		cfg.DeliveryTimeout = 10 * time.Second
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: cfg.DeliveryTimeout}
	}
	e := &Emulator{cfg: cfg, db: newDB(), faults: &Faults{}, sleep: sleepCtx, changesOf: map[int][]int{},
		requests: requestCounts{n: map[string]int64{}}}
	if cfg.Faults == nil {
		e.cfg.Faults = e.faults
	}
	e.deliveries = newDeliverer(e.cfg)
	e.routes()
	return e
}

// Start makes an emulator and serves it on cfg.Addr until Close.
func Start(cfg Config) (*Emulator, error) {
	e := New(cfg)
	ln, err := net.Listen("tcp", e.cfg.Addr)
	if err != nil {
		e.deliveries.close()
		return nil, fmt.Errorf("listen for the NetBox emulator on %s: %w", e.cfg.Addr, err)
	}
	e.url = "http://" + ln.Addr().String()
	e.srv = &http.Server{Handler: e.mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.cfg.Logger.Error().Err(err).Msg("netbox emulator stopped serving")
		}
	}()
	return e, nil
}

// URL is the base URL Start listens on, e.g. http://127.0.0.1:41234 (empty before Start).
func (e *Emulator) URL() string { return e.url }

// Handler serves NetBox's API.
func (e *Emulator) Handler() http.Handler { return e.mux }

// Faults returns the built-in fault schedule (used unless Config.Faults replaced it).
func (e *Emulator) Faults() *Faults { return e.faults }

// Close stops listening, waits for queued deliveries to finish and stops the workers.
func (e *Emulator) Close() error {
	var err error
	if e.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = e.srv.Shutdown(ctx)
	}
	e.deliveries.close()
	return err
}

func (e *Emulator) routes() {
	m := http.NewServeMux()
	e.resources = map[string]*resource{}
	for _, res := range []*resource{e.deviceResource(), e.interfaceResource(), e.macResource(), e.ipResource(),
		e.journalResource(), e.customFieldResource(), e.choiceSetResource(), e.webhookResource(),
		e.eventRuleResource(), e.changeResource()} {
		e.register(m, res)
	}
	m.Handle("GET /api/{$}", e.api(false, e.getRoot))
	m.Handle("GET /api/status/", e.api(false, e.getStatus))
	m.Handle("GET /api/authentication-check/", e.api(false, e.getAuthCheck))
	m.Handle("/api/", e.api(false, func(c *reqCtx) { c.detail(http.StatusNotFound, "Not found.") }))
	e.mux = m
}
