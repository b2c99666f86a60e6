package netboxemu

import (
	"slices"
	"time"
)

// Webhooks and event rules as resources (WebhookFilterSet, EventRuleFilterSet at NB@v4.6.8).

func (e *Emulator) webhookResource() *resource {
	w := func(id int) *webhook { return e.db.webhooks[id] }
	created := func(id int) time.Time { return w(id).created }
	updated := func(id int) time.Time { return w(id).lastUpdated }
	ordering := baseOrdering(created, updated)
	ordering["name"] = func(id int) any { return w(id).name }
	filters := append([]filterDef{
		numberF("id", func(id int) any { return id }),
		charF("name", func(id int) any { return w(id).name }),
		{name: "payload_url", kind: fChar, base: "icontains", value: func(id int) any { return w(id).payloadURL }},
		choiceF("http_method", httpMethods, func(id int) any { return w(id).httpMethod }),
		charF("http_content_type", func(id int) any { return w(id).contentType }),
		charF("secret", func(id int) any { return w(id).secret }),
		boolF("ssl_verification", func(id int) any { return w(id).sslVerification }),
		charF("ca_file_path", func(int) any { return nil }),
		charF("description", func(id int) any { return w(id).description }),
	}, changeLogged(created, updated)...)
	return &resource{
		path: "extras/webhooks", objectType: "extras.webhook", verbose: "Webhook", model: "Webhook",
		rows: func(keep func(int) bool) []int {
			return sortedKept(e.db.webhooks, func(a, b *webhook) bool { return a.name < b.name }, keep)
		},
		has:         idExists(func() map[int]*webhook { return e.db.webhooks }),
		lastUpdated: updated,
		render:      func(c rc, id int) obj { return e.renderWebhook(c, w(id)) },
		snapshot:    func(id int) obj { return e.snapWebhook(w(id)) },
		repr:        func(id int) string { return w(id).name },
		brief:       []string{"id", "url", "display", "name", "description"},
		filters:     filters,
		search: func(id int, q string) bool {
			return anyContainsFold(q, w(id).name, w(id).description, w(id).payloadURL)
		},
		cf:       func(int) map[string]any { return nil },
		ordering: ordering,
		meta:     webhookMeta,
		create: func(c *reqCtx, body obj) (int, bool) {
			return apiCreate(c, "extras.webhook", body, e.addWebhook, func(id int) obj { return e.snapWebhook(w(id)) })
		},
		update: func(c *reqCtx, id int, body obj, partial bool) bool {
			return apiSave(c, e.resources["extras.webhook"], w(id), id, body, partial, e.applyWebhook,
				func(x *webhook) { x.lastUpdated = c.touch(x.lastUpdated) })
		},
		remove: e.removeWebhook,
	}
}

func (e *Emulator) eventRuleResource() *resource {
	r := func(id int) *eventRule { return e.db.eventRules[id] }
	created := func(id int) time.Time { return r(id).created }
	updated := func(id int) time.Time { return r(id).lastUpdated }
	ordering := baseOrdering(created, updated)
	ordering["name"] = func(id int) any { return r(id).name }
	filters := append([]filterDef{
		numberF("id", func(id int) any { return id }),
		charF("name", func(id int) any { return r(id).name }),
		charF("description", func(id int) any { return r(id).description }),
		boolF("enabled", func(id int) any { return r(id).enabled }),
		choiceF("action_type", map[string]string{"webhook": "", "script": "", "notification": ""},
			func(int) any { return "webhook" }),
		typeF("action_object_type", func(int) any { return "extras.webhook" }),
		numberF("action_object_id", func(id int) any { return r(id).webhook }),
		typeF("object_type", func(id int) any { return toAny(r(id).objectTypes) }),
		methodF("event_type", func(id int, vs []string) bool { // event_types__overlap
			return slices.ContainsFunc(r(id).eventTypes, func(t string) bool { return slices.Contains(vs, t) })
		}),
	}, changeLogged(created, updated)...)
	return &resource{
		path: "extras/event-rules", objectType: "extras.eventrule", verbose: "Event Rule", model: "EventRule",
		rows: func(keep func(int) bool) []int {
			return sortedKept(e.db.eventRules, func(a, b *eventRule) bool { return a.name < b.name }, keep)
		},
		has:         idExists(func() map[int]*eventRule { return e.db.eventRules }),
		lastUpdated: updated,
		render:      func(c rc, id int) obj { return e.renderEventRule(c, r(id)) },
		snapshot:    func(id int) obj { return e.snapEventRule(r(id)) },
		repr:        func(id int) string { return r(id).name },
		brief:       []string{"id", "url", "display", "name", "description"},
		filters:     filters,
		search:      func(id int, q string) bool { return anyContainsFold(q, r(id).name, r(id).description) },
		cf:          func(int) map[string]any { return nil },
		ordering:    ordering,
		meta:        eventRuleMeta,
		create: func(c *reqCtx, body obj) (int, bool) {
			return apiCreate(c, "extras.eventrule", body, e.addEventRule, func(id int) obj { return e.snapEventRule(r(id)) })
		},
		update: func(c *reqCtx, id int, body obj, partial bool) bool {
			return apiSave(c, e.resources["extras.eventrule"], r(id), id, body, partial, e.applyEventRule,
				func(x *eventRule) { x.lastUpdated = c.touch(x.lastUpdated) })
		},
		remove: e.removeEventRule,
	}
}
