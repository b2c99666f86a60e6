// Package webhook is NetBox → fleetd: it admits a body to one of its source's read slots (admit.go),
// reads it within the cap of its route (the handlers' route table: MaxBody) and a read timeout,
// verifies NetBox's HMAC signature over the raw bytes as they arrive, before anything is parsed,
// decodes the event in any NetBox 4.3–4.7 shape, and hands a "re-read this device" trigger to
// the fleet service (docs/design.md §2, §6; NetBox 4.6.8 netbox/extras/webhooks.py).
//
// A verified event is answered 202 as soon as it is queued; a pool of workers (Run) does the
// re-read and the decision. A full queue is answered 503 with Retry-After, and the periodic
// reconcile, which re-reads every device, completes whatever a webhook did not.
package webhook

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
)

// Reconciler is the part of the fleet service a webhook triggers. Errors wrapping
// fleet.ErrNetBoxUnavailable mean NetBox's REST API could not be read; any other error means the request
// is recorded and will be completed by a later reconcile.
type Reconciler interface {
	Reconcile(ctx context.Context, id int64) (fleet.Outcome, error)
}

// Config configures the webhook intake.
type Config struct {
	Secret      []byte        // the webhook secret NetBox signs with
	ServiceUser string        // fleetd's own NetBox user: its device updates are echoes
	Timeout     time.Duration // how long one webhook may take to re-read and decide
	Queue       int           // verified events waiting for a worker; 0 means 1024
	Workers     int           // events re-read and decided at once; 0 means 16 (fleetd.yaml netbox.webhook_workers)

	// The admission (admit.go). Sources are NetBox's addresses (fleetd.yaml
	// netbox.webhook_sources); empty, every source shares NetBox's pool.
	Sources     []netip.Prefix
	BodyTimeout time.Duration // how long a body may take to arrive once its slot is taken; 0 means DefaultBodyTimeout
	NetBoxSlots int           // bodies from Sources read at once; 0 means DefaultNetBoxSlots
	OtherSlots  int           // bodies from any other source read at once; 0 means DefaultOtherSlots
	NetBoxWait  time.Duration // how long a body from Sources waits for a slot; 0 means DefaultNetBoxWait
	// RefusalLogEvery is how often a source's refusals of one reason are logged at most (refusalLog);
	// 0 means DefaultRefusalLogEvery.
	RefusalLogEvery time.Duration
	Now             func() time.Time // the clock of the read deadlines and the refusal log; default time.Now
}

// MaxBody caps a webhook's body (the handlers' route table applies it): NetBox's largest delivery
// to fleetd, a device update whose fields fleetd filled to their caps, is 131 KiB (it carries the
// device three times: data and both snapshots); TestBodyCapFitsNetBoxsLargestDelivery measures it
// and holds the cap at twice that or more.
const MaxBody = 384 << 10

// RetryAfter is what a full queue tells NetBox to wait, in seconds (Retry-After).
const RetryAfter = 5

// job is a verified event waiting for a worker.
type job struct {
	ev    zerolog.Logger
	p     payload
	id    int64
	route string
}

// Deps are the intake's collaborators.
type Deps struct {
	Reconciler          Reconciler
	RefreshReservations func(ctx context.Context) // a device's addresses or MACs may have changed: rewrite the Kea reservations; must not block; may be nil
	Logger              zerolog.Logger
	Registry            prometheus.Registerer
}

// Intake serves NetBox's webhooks.
type Intake struct {
	cfg     Config
	deps    Deps
	owned   map[string]bool
	results *prometheus.CounterVec
	work    *prometheus.CounterVec
	jobs    chan job

	netbox, other *pool // read slots (admit.go)
	refusals      *refusalLog

	mu sync.Mutex
	// queued are the devices with an event in the queue that no worker has taken yet: a second
	// event for one of them, carrying nothing to undo, is coalesced into it (coalesce).
	queued map[int64]bool
}

// New builds the intake. A webhook secret is required: an unsigned webhook is never accepted.
func New(cfg Config, deps Deps) (*Intake, error) {
	if len(cfg.Secret) == 0 {
		return nil, errors.New("new webhook intake: no webhook secret (netbox.webhook_secret_file)")
	}
	if deps.Reconciler == nil {
		return nil, errors.New("new webhook intake: no reconciler")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 20 * time.Second
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 1024
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 16
	}
	cfg.BodyTimeout = cmp.Or(cfg.BodyTimeout, DefaultBodyTimeout)
	cfg.NetBoxSlots = cmp.Or(cfg.NetBoxSlots, DefaultNetBoxSlots)
	cfg.OtherSlots = cmp.Or(cfg.OtherSlots, DefaultOtherSlots)
	cfg.NetBoxWait = cmp.Or(cfg.NetBoxWait, DefaultNetBoxWait)
	cfg.RefusalLogEvery = cmp.Or(cfg.RefusalLogEvery, DefaultRefusalLogEvery)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	results := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetd_webhooks_total",
		Help: "NetBox webhooks by route and answer (accepted: queued, coalesced, echo, ignored; refused: bad_signature, malformed, too_large, timeout, busy, queue_full).",
	}, []string{"route", "outcome"})
	work := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetd_webhook_work_total",
		Help: "Queued NetBox webhooks by route and what their worker made of them (decided, netbox_unavailable).",
	}, []string{"route", "outcome"})
	if deps.Registry != nil {
		for _, c := range []prometheus.Collector{results, work} {
			if err := deps.Registry.Register(c); err != nil {
				return nil, fmt.Errorf("register webhook metrics: %w", err)
			}
		}
	}
	return &Intake{cfg: cfg, deps: deps, owned: ownedFields(), results: results, work: work,
		jobs: make(chan job, cfg.Queue), queued: map[int64]bool{},
		netbox: newPool("netbox", cfg.NetBoxSlots, cfg.NetBoxWait), other: newPool("other", cfg.OtherSlots, 0),
		refusals: &refusalLog{log: deps.Logger, now: cfg.Now, every: cfg.RefusalLogEvery, seen: map[refusalKey]*refusalCount{}}}, nil
}

// outcomes are every answer fleetd_webhooks_total counts, created at 0 for each route (a series
// that exists before its first event, so that increase() sees that event).
var outcomes = []string{"accepted", "coalesced", "echo", "ignored", api.CodeBadSignature, api.CodeMalformed, api.CodeTooLarge,
	api.CodeTimeout, api.CodeBusy, api.CodeQueueFull}

// Run re-reads and decides the queued events with Config.Workers workers until ctx ends; a worker
// finishes the event it holds first (its own timeout still applies). Events left in the queue are
// completed by the periodic reconcile.
func (in *Intake) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range in.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-in.jobs:
					in.do(context.WithoutCancel(ctx), j)
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// Handler serves one webhook route. route names it in logs and metrics ("provision", "attest",
// "wipe", "retire" for the per-action event rules, "inventory" for the generic one). Every route
// does the same thing, because a webhook is only a hint: re-read the device and decide.
//
// The caller caps the request body (http.MaxBytesReader): the handlers' route table gives every
// webhook route its limit (docs/http.md), and a body over it is answered 413 too_large here.
func (in *Intake) Handler(route string) http.Handler {
	for _, o := range outcomes {
		in.results.WithLabelValues(route, o)
	}
	for _, o := range []string{"decided", api.CodeNetBoxUnavailable} {
		in.work.WithLabelValues(route, o)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.serve(w, r, route)
	})
}

func (in *Intake) serve(w http.ResponseWriter, r *http.Request, route string) {
	l := in.deps.Logger.With().Str("request_id", w.Header().Get("X-Request-Id")).Str("route", route).Logger()
	log := &l
	// 1. A read slot of the source's pool, before anything is read (admit.go).
	peer := peerOf(r)
	slots := in.poolOf(peer)
	if !slots.acquire(r.Context()) {
		w.Header().Set("Retry-After", fmt.Sprint(RetryAfter))
		in.refuse(w, log, peer, route, http.StatusServiceUnavailable, api.CodeBusy, false,
			fmt.Sprintf("fleetd reads %d webhook bodies at once from this source's pool (%s), and every slot is taken; retry after %d s", cap(slots.slots), slots.name, RetryAfter))
		return
	}
	// 2. The signed event (event).
	p, id, ok := in.event(w, r, log, peer, route)
	slots.release()
	if !ok {
		return
	}
	// The device id is not in ev: the decision line's outcome names it (fleet.Outcome), and a
	// line that ignores the event adds it itself, so no line carries the key twice.
	ev := log.With().Str("event", p.Event).Str("object_type", p.objectType()).
		Str("netbox_request", p.requestID()).Str("netbox_user", p.user()).Logger()
	// 2. What it means.
	echo := in.cfg.ServiceUser != "" && p.user() == in.cfg.ServiceUser && p.objectType() == "dcim.device" &&
		p.onlyOwnedChanged(in.owned)
	// Anything but fleetd's own echo and a device update that left its name and address as they
	// were may change a reservation (a name, a MAC, an address, a device appearing or going): hint
	// the Kea refresh, which coalesces hints. A storm of owner requests is not a storm of
	// refreshes, each of which reads the whole fleet.
	if in.deps.RefreshReservations != nil && !echo && !p.leavesReservations() {
		in.deps.RefreshReservations(context.WithoutCancel(r.Context()))
	}
	switch {
	case id == 0 || p.Event == "deleted" && p.objectType() == "dcim.device":
		in.accept(w, &ev, peer, route, id, "ignored", "the event concerns no device fleetd can act on")
		return
	case echo:
		in.accept(w, &ev, peer, route, id, "echo", "fleetd's own update; nothing left to do")
		return
	}
	// 3. Queued for a worker: the same decision the reconciler makes, soon; or folded into the
	// device's event already waiting, whose decision reads NetBox after this event was sent.
	if !in.queue(id) {
		in.accept(w, &ev, peer, route, id, "coalesced", "an event for the device is already queued; its decision reads NetBox after this one")
		return
	}
	select {
	case in.jobs <- job{ev: ev, p: p, id: id, route: route}:
	default:
		in.taken(id)
		w.Header().Set("Retry-After", fmt.Sprint(RetryAfter))
		in.refuse(w, &ev, peer, route, http.StatusServiceUnavailable, api.CodeQueueFull, true,
			fmt.Sprintf("fleetd's webhook queue (%d events) is full; retry after %d s, and the periodic reconcile re-reads the device in any case", cap(in.jobs), RetryAfter))
		return
	}
	in.results.WithLabelValues(route, "accepted").Inc()
	writeBody(w, http.StatusAccepted, map[string]string{"outcome": "accepted"})
}

// queue marks device id as having an event in the queue, and reports false when it had one
// already (the new event is then coalesced into it).
//
// The work queue's rule (client-go's workqueue has it too): an event that arrives while the
// device's event waits adds nothing, because the waiting event's decision has not read NetBox
// yet and will read what the new one announces; an event that arrives once a worker took the
// device's event is queued again, because that decision may have read NetBox before the change.
// An event that carries another user's write of fleetd's fields is no different: its snapshots
// are never what fleetd puts back (the decision's read of the device and its change log is).
func (in *Intake) queue(id int64) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.queued[id] {
		return false
	}
	in.queued[id] = true
	return true
}

// taken clears device id's mark once a worker took its event (or it could not be queued).
func (in *Intake) taken(id int64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.queued, id)
}

// do re-reads and decides one queued event, within Config.Timeout. The device's mark is cleared
// before anything is read, so an event sent from now on is queued again (queue).
func (in *Intake) do(ctx context.Context, j job) {
	in.taken(j.id)
	ctx, cancel := context.WithTimeout(ctx, in.cfg.Timeout)
	defer cancel()
	out, err := in.decide(ctx, j.id)
	switch {
	case errors.Is(err, fleet.ErrNetBoxUnavailable):
		in.work.WithLabelValues(j.route, api.CodeNetBoxUnavailable).Inc()
		j.ev.Error().Err(err).EmbedObject(out).Str("detail", "NetBox could not be read; the periodic reconcile retries").Msg("decision")
	case err != nil:
		in.work.WithLabelValues(j.route, "decided").Inc()
		j.ev.Warn().Err(err).EmbedObject(out).Msg("decision") // recorded in NetBox; completed by a later reconcile
	default:
		in.work.WithLabelValues(j.route, "decided").Inc()
		j.ev.Info().EmbedObject(out).Msg("decision")
	}
}

// event reads, verifies and decodes a webhook: the form of its signature header first (a
// request without one is refused unread), then the body (capped by the route, within
// Config.BodyTimeout) with its HMAC computed as it arrives, checked before any parsing, then the
// NetBox event and the device it concerns. A webhook that fails a step is answered here, and ok
// is false.
func (in *Intake) event(w http.ResponseWriter, r *http.Request, log *zerolog.Logger, peer netip.Addr, route string) (p payload, id int64, ok bool) {
	want, formed := signatureOf(r.Header.Get("X-Hook-Signature"))
	if !formed {
		in.refuse(w, log, peer, route, http.StatusUnauthorized, api.CodeBadSignature, false,
			"X-Hook-Signature is missing or is not 128 hex digits: NetBox sends the HMAC-SHA512 of the body with the configured webhook secret")
		return p, 0, false
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(in.cfg.Now().Add(in.cfg.BodyTimeout)) // not every writer supports it (tests)
	body, signed, err := in.readSigned(r.Body, want)             // capped by the route (Handler)
	_ = rc.SetReadDeadline(time.Time{})
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			in.refuse(w, log, peer, route, http.StatusRequestEntityTooLarge, api.CodeTooLarge, false,
				fmt.Sprintf("the webhook body is larger than %d bytes", tooBig.Limit))
		case errors.Is(err, os.ErrDeadlineExceeded):
			in.refuse(w, log, peer, route, http.StatusRequestTimeout, api.CodeTimeout, false,
				fmt.Sprintf("the webhook body did not arrive within %s", in.cfg.BodyTimeout))
		default:
			in.refuse(w, log, peer, route, http.StatusBadRequest, api.CodeMalformed, false, "the webhook body could not be read")
		}
		return p, 0, false
	}
	if !signed {
		in.refuse(w, log, peer, route, http.StatusUnauthorized, api.CodeBadSignature, true,
			"X-Hook-Signature is not the HMAC-SHA512 of the body with the configured webhook secret")
		return p, 0, false
	}
	if err := json.Unmarshal(body, &p); err != nil {
		in.refuse(w, log, peer, route, http.StatusBadRequest, api.CodeMalformed, true, "the webhook body is not a NetBox event: "+err.Error())
		return p, 0, false
	}
	if id, err = p.deviceID(); err != nil {
		in.refuse(w, log, peer, route, http.StatusBadRequest, api.CodeMalformed, true, err.Error())
		return p, 0, false
	}
	return p, id, true
}

// decide reconciles the device: its read carries NetBox's change log, so another user's write of
// fleetd's own fields (a client writing back what it read, or a forged value) is judged and put
// back from fleetd's own writes before anything is decided (docs/design.md §9). The event's
// snapshots are never restored: they say what changed, and anyone who can read the webhook
// secret can sign them, replayed or forged.
func (in *Intake) decide(ctx context.Context, id int64) (fleet.Outcome, error) {
	return in.deps.Reconciler.Reconcile(ctx, id)
}

// accept answers a webhook that makes no work, counts it and logs it sampled (refusalLog).
func (in *Intake) accept(w http.ResponseWriter, log *zerolog.Logger, peer netip.Addr, route string, id int64, outcome, why string) {
	in.results.WithLabelValues(route, outcome).Inc()
	ev := log.With().Int64("device_id", id).Logger()
	in.refusals.accepted(&ev, peer, outcome, why)
	writeBody(w, http.StatusAccepted, map[string]string{"outcome": outcome})
}

// refuse answers a refused webhook, counts it and logs it sampled (refusalLog). read says
// whether its body was read to the end; when not, the connection is closed after the answer.
func (in *Intake) refuse(w http.ResponseWriter, log *zerolog.Logger, peer netip.Addr, route string, status int, code string, read bool, msg string) {
	in.results.WithLabelValues(route, code).Inc()
	in.refusals.refused(log, peer, code, msg)
	if !read {
		unread(w)
	}
	writeBody(w, status, api.Error{Code: code, Message: msg})
}

// writeBody answers with v as JSON, without encoding/json's HTML escaping (a message keeps its
// "<" and ">").
func writeBody(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
