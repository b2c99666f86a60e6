package netboxemu

import (
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
)

// Object events, as NetBox 4.6.8 produces them (NB@v4.6.8:netbox/core/signals.py, extras/events.py,
// extras/webhooks.py): every save inside an API request enqueues an event, even when nothing
// changed; events are coalesced per object per request (the first prechange is kept, the latest
// postchange and data win); when the request ends each event is matched against the enabled
// event rules of its type, and each matching rule's webhook is queued for delivery.

// event is one object event of the current request.
type event struct {
	objectType string // app.model
	objectID   int
	eventType  string // object_created, object_updated, object_deleted
	prechange  any    // snapshot before the request touched the object; nil on create
	postchange any    // snapshot after the latest save; nil on delete
	data       obj    // frozen REST data, set for deletes (the row is gone at flush)
}

// webhookEvents maps event types to the webhook body's "event" (extras/constants.py).
var webhookEvents = map[string]string{"object_created": "created", "object_updated": "updated",
	"object_deleted": "deleted"}

// enqueue records an event of the current request, coalescing with an earlier one for the same
// object. For a delete, data must be the object's REST data rendered before it was removed.
func (c *reqCtx) enqueue(objectType string, id int, eventType string, pre, post any, data obj) {
	c.logChange(objectType, id, eventType, pre, post) // the change log is not coalesced
	for _, ev := range c.events {
		if ev.objectType == objectType && ev.objectID == id {
			ev.postchange = post
			if eventType == "object_deleted" {
				ev.eventType, ev.data = eventType, data
			}
			return
		}
	}
	c.events = append(c.events, &event{objectType: objectType, objectID: id, eventType: eventType,
		prechange: pre, postchange: post, data: data})
}

// flush is process_event_queue at the end of the request: data is serialized now (relative
// URLs, request=None), rules are matched, and one delivery per matching rule is queued. A rule
// whose conditions cannot be evaluated (InvalidCondition) is skipped, as NetBox logs it and
// skips it; an exception NetBox does not catch (a condition's path through a string or a
// number) ends the flush: the deliveries queued before it stay queued, the rest of the
// request's events are lost, and the request is answered 500 (reqCtx.failedFlush).
func (c *reqCtx) flush() *pyException {
	events := c.events
	c.events = nil
	if len(events) == 0 {
		return nil
	}
	reqID := c.requestID()
	for _, ev := range events {
		data := ev.data
		if data == nil {
			data = c.e.eventData(ev.objectType, ev.objectID)
		}
		if data == nil {
			continue
		}
		for _, r := range c.e.rulesFor(ev.objectType, ev.eventType) {
			ok, err := r.cond.match(data)
			var invalid *invalidCondition
			var ex *pyException
			switch {
			case errors.As(err, &ex):
				return ex
			case errors.As(err, &invalid):
				c.e.cfg.Logger.Warn().Str("event_rule", r.name).Str("object_type", ev.objectType).Int("object_id", ev.objectID).
					Str("error", invalid.msg).Msg("netbox emulator: evaluation of the event rule's conditions failed; the rule does not fire")
				continue
			case !ok:
				continue
			}
			c.e.deliveries.enqueue(c.e.buildJob(c, r, ev, data, reqID))
		}
	}
	return nil
}

// eventData serializes an existing object for an event (webhook data uses no request).
func (e *Emulator) eventData(objectType string, id int) obj {
	res, ok := e.resources[objectType]
	if !ok || !res.has(id) {
		return nil
	}
	return res.dataFor(id)
}

// rulesFor is EventRule.objects.filter(event_types__contains=[t], object_types=ot, enabled=True),
// in NetBox's ordering (by name).
func (e *Emulator) rulesFor(objectType, eventType string) []*eventRule {
	var out []*eventRule
	for _, id := range sortedIDs(e.db.eventRules, func(a, b *eventRule) bool { return a.name < b.name }) {
		r := e.db.eventRules[id]
		if r.enabled && slices.Contains(r.eventTypes, eventType) && slices.Contains(r.objectTypes, objectType) {
			out = append(out, r)
		}
	}
	return out
}

// buildJob renders send_webhook's request: the 4.6 default body, the webhook's Content-Type and
// additional headers, and X-Hook-Signature when the webhook has a secret.
func (e *Emulator) buildJob(c *reqCtx, r *eventRule, ev *event, data obj, reqID string) *job {
	w := e.db.webhooks[r.webhook]
	username := c.user.username
	body := encodePython(obj{
		{"event", webhookEvents[ev.eventType]},
		{"timestamp", pyISO(c.now(), "+00:00")},
		{"object_type", ev.objectType},
		{"username", username},
		{"request_id", reqID},
		{"data", data},
		{"request", obj{{"id", reqID}, {"method", c.r.Method}, {"path", c.r.URL.Path}, {"user", username}}},
		{"snapshots", obj{{"prechange", ev.prechange}, {"postchange", ev.postchange}}},
	})
	h := http.Header{}
	h.Set("Content-Type", w.contentType)
	h.Set("User-Agent", "python-requests/2.32.5")
	for _, line := range strings.Split(w.additionalHeaders, "\n") {
		if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) != "" {
			h.Set(strings.TrimSpace(name), strings.TrimSpace(value))
		}
	}
	if w.secret != "" {
		h.Set("X-Hook-Signature", Sign(w.secret, body))
	}
	return &job{d: Delivery{Webhook: w.name, EventRule: r.name, Method: w.httpMethod, URL: w.payloadURL,
		Header: h, Body: body, Event: webhookEvents[ev.eventType], ObjectType: ev.objectType,
		ObjectID: int64(ev.objectID), RequestID: reqID, User: username, Enqueued: c.now()}}
}

// Sign is NetBox's generate_signature: lowercase hex HMAC-SHA512 of the exact body bytes.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha512.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// newUUID draws a random (version 4) UUID, as Django's request id.
func newUUID(rnd io.Reader) string {
	b := make([]byte, 16)
	if _, err := io.ReadFull(rnd, b); err != nil {
		panic(fmt.Sprintf("netboxemu: read randomness: %v", err))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
