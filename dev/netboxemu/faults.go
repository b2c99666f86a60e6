package netboxemu

import (
	"net/http"
	"strings"
	"sync"
	"time"
)

// Fault injection: the hook points where a reliability test makes NetBox misbehave. The REST API
// consults the hook before handling each request (before authentication, like a failing proxy
// or worker); the delivery workers consult it before sending each webhook.

// FaultHook decides the fault, if any, for one API request or one webhook delivery. It is called
// concurrently.
type FaultHook interface {
	APIFault(r *http.Request) APIFault
	DeliveryFault(d Delivery) DeliveryFault
}

// APIFault is what happens to one API request. The zero value is no fault.
type APIFault struct {
	Delay  time.Duration // wait this long first (cut short if the client goes away)
	Status int           // then answer with this status instead of handling it; 0 handles it
}

// DeliveryFault is what happens to one webhook delivery. The zero value is no fault.
type DeliveryFault struct {
	Delay time.Duration // wait this long before sending
	Drop  bool          // then send nothing (recorded with Dropped), like a lost RQ job
}

// APIFaultRule schedules an APIFault for matching requests: the first After matching requests
// pass, the next Times get the fault (Times 0: every one after that).
type APIFaultRule struct {
	Method     string // "" matches any method
	PathPrefix string // "" matches any path, e.g. "/api/dcim/devices/"
	After      int
	Times      int
	Fault      APIFault
}

// DeliveryFaultRule schedules a DeliveryFault for deliveries of a webhook ("" any), counted the
// same way as APIFaultRule.
type DeliveryFaultRule struct {
	Webhook string
	After   int
	Times   int
	Fault   DeliveryFault
}

// Faults is the built-in FaultHook: a list of rules, each counting the requests it matches.
// The first rule that decides to fault a request wins.
type Faults struct {
	mu       sync.Mutex
	api      []*counted[APIFaultRule]
	delivery []*counted[DeliveryFaultRule]
}

type counted[R any] struct {
	rule  R
	seen  int // events the rule matched
	fired int // events it faulted
}

// Fired reports how many requests or deliveries one rule has faulted so far (it keeps counting
// after Clear removed the rule: the count is of what happened). A test that schedules a fault
// reads it to know the fault met anything at all.
type Fired func() int

// AddAPI adds a rule for API requests.
func (f *Faults) AddAPI(r APIFaultRule) Fired {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &counted[APIFaultRule]{rule: r}
	f.api = append(f.api, c)
	return f.firedOf(&c.fired)
}

// AddDelivery adds a rule for webhook deliveries.
func (f *Faults) AddDelivery(r DeliveryFaultRule) Fired {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &counted[DeliveryFaultRule]{rule: r}
	f.delivery = append(f.delivery, c)
	return f.firedOf(&c.fired)
}

func (f *Faults) firedOf(n *int) Fired {
	return func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return *n
	}
}

// Clear removes every rule.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.api, f.delivery = nil, nil
}

// APIFault implements FaultHook.
func (f *Faults) APIFault(r *http.Request) APIFault {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out APIFault
	decided := false
	for _, c := range f.api {
		if (c.rule.Method != "" && c.rule.Method != r.Method) || !strings.HasPrefix(r.URL.Path, c.rule.PathPrefix) {
			continue
		}
		c.seen++
		if !decided && scheduled(c.seen, c.rule.After, c.rule.Times) {
			out, decided = c.rule.Fault, true
			c.fired++
		}
	}
	return out
}

// DeliveryFault implements FaultHook.
func (f *Faults) DeliveryFault(d Delivery) DeliveryFault {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out DeliveryFault
	decided := false
	for _, c := range f.delivery {
		if c.rule.Webhook != "" && c.rule.Webhook != d.Webhook {
			continue
		}
		c.seen++
		if !decided && scheduled(c.seen, c.rule.After, c.rule.Times) {
			out, decided = c.rule.Fault, true
			c.fired++
		}
	}
	return out
}

// scheduled reports whether the n-th matching event (from 1) falls in the fault window.
func scheduled(n, after, times int) bool {
	return n > after && (times == 0 || n <= after+times)
}

// injectAPIFault applies the hook's fault to a request; true means it has been answered.
func (e *Emulator) injectAPIFault(w http.ResponseWriter, r *http.Request) bool {
	f := e.cfg.Faults.APIFault(r)
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return true
		}
	}
	if f.Status == 0 {
		return false
	}
	e.cfg.Logger.Info().Str("method", r.Method).Str("path", r.URL.Path).Int("status", f.Status).
		Msg("netbox emulator answered with an injected fault")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.Status)
	_, _ = w.Write(encodeREST(exceptionBody("InjectedFault", "injected fault")))
	return true
}
