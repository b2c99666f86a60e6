package netboxemu

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// Webhook delivery, as NetBox's RQ workers do it with the default RQ_RETRY_MAX=0
// (NB@v4.6.8:netbox/extras/events.py, netbox/utilities/rqworker.py get_rq_retry): asynchronous,
// several workers (so unordered), at most once (a failed delivery is recorded and never retried),
// success only on 2xx, redirects followed.

// Delivery is one webhook request the emulator sent, or meant to send.
type Delivery struct {
	Seq        int // order of completion, from 1
	Webhook    string
	EventRule  string
	Method     string
	URL        string
	Header     http.Header
	Body       []byte // the exact bytes sent (and signed)
	Event      string // created, updated or deleted
	ObjectType string // e.g. dcim.device
	ObjectID   int64
	RequestID  string // the NetBox request that caused it
	User       string // the token's user (request.user, username)
	Enqueued   time.Time

	StatusCode int    // the receiver's answer; 0 when none
	Err        string // transport error or non-2xx, as NetBox's job would fail
	Dropped    bool   // a fault dropped it: nothing was sent
}

// OK reports whether the receiver answered 2xx.
func (d Delivery) OK() bool { return d.StatusCode >= 200 && d.StatusCode <= 299 && d.Err == "" }

type job struct {
	d Delivery
}

type deliverer struct {
	cfg  Config
	jobs chan *job
	wg   sync.WaitGroup

	mu      sync.Mutex
	pending int
	changed chan struct{} // closed and replaced whenever pending drops
	done    []Delivery
	closed  bool
}

func newDeliverer(cfg Config) *deliverer {
	d := &deliverer{cfg: cfg, jobs: make(chan *job, 4096), changed: make(chan struct{})}
	for i := 0; i < cfg.Workers; i++ {
		d.wg.Add(1)
		go d.work()
	}
	return d
}

func (d *deliverer) enqueue(j *job) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.pending++
	d.mu.Unlock()
	d.jobs <- j
}

func (d *deliverer) work() {
	defer d.wg.Done()
	for j := range d.jobs {
		d.deliver(&j.d)
		d.mu.Lock()
		j.d.Seq = len(d.done) + 1
		d.done = append(d.done, j.d)
		d.pending--
		close(d.changed)
		d.changed = make(chan struct{})
		d.mu.Unlock()
	}
}

// deliver sends one webhook, after consulting the fault hook.
func (d *deliverer) deliver(del *Delivery) {
	f := d.cfg.Faults.DeliveryFault(*del)
	if f.Delay > 0 {
		time.Sleep(f.Delay)
	}
	log := d.cfg.Logger.With().Str("webhook", del.Webhook).Str("event", del.Event).
		Str("object_type", del.ObjectType).Int64("object_id", del.ObjectID).Logger()
	if f.Drop {
		del.Dropped = true
		log.Info().Str("outcome", "dropped").Msg("webhook delivery dropped by an injected fault")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.DeliveryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, del.Method, del.URL, bytes.NewReader(del.Body))
	if err != nil {
		del.Err = "form the request: " + err.Error()
		return
	}
	req.Header = del.Header.Clone()
	resp, err := d.cfg.HTTPClient.Do(req)
	if err != nil {
		del.Err = err.Error()
		log.Warn().Err(err).Str("outcome", "failed").Msg("webhook delivery failed")
		return
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	del.StatusCode = resp.StatusCode
	if !del.OK() {
		del.Err = "Status " + resp.Status + " returned, webhook FAILED to process."
		log.Warn().Int("status", resp.StatusCode).Str("outcome", "failed").Msg("webhook delivery refused")
		return
	}
	log.Debug().Int("status", resp.StatusCode).Str("outcome", "delivered").Msg("webhook delivered")
}

func (d *deliverer) close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	d.mu.Unlock()
	close(d.jobs)
	d.wg.Wait()
}

// Deliveries returns every finished delivery (sent, failed or dropped) in completion order.
func (e *Emulator) Deliveries() []Delivery {
	d := e.deliveries
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Delivery(nil), d.done...)
}

// WaitIdle waits until no delivery is queued or in flight. API requests enqueue their
// deliveries before they answer, so after a write returns WaitIdle covers what it caused.
func (e *Emulator) WaitIdle(ctx context.Context) error {
	d := e.deliveries
	for {
		d.mu.Lock()
		pending, changed := d.pending, d.changed
		d.mu.Unlock()
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
