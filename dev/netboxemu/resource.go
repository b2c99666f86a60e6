package netboxemu

import (
	"net/http"
	"net/url"
	"time"
)

// A resource is one REST endpoint pair, /api/<path>/ and /api/<path>/{id}/, served the way
// NetBox 4.6.8's NetBoxModelViewSet serves a model (NB@v4.6.8:netbox/netbox/api/viewsets/):
// list with filters, ordering and paging; create (one object, or a list: bulk); retrieve,
// update (PUT, PATCH) and destroy by id with ETag/If-Match; bulk update and bulk destroy with a
// list body on the list endpoint; OPTIONS metadata. The per-model parts are closures over the
// database, keyed by id; every closure runs under Emulator.mu.
type resource struct {
	path       string // e.g. "dcim/devices"
	objectType string // e.g. "dcim.device"
	verbose    string // the model's verbose name, title-cased: the OPTIONS name ("Device List")
	model      string // the model's class name, in 404s: "No Device matches the given query."
	readOnly   bool   // NetBoxReadOnlyModelViewSet: GET and OPTIONS only

	// rows is the rows keep accepts (every row when keep is nil), in the model's Meta.ordering;
	// filtering comes before the sort, so a filtered list of a large table costs its matches'
	// sort, not the table's.
	rows func(keep func(id int) bool) []int
	// narrow, when it is set and ok, is the rows a list's query can select, in rows' order, read
	// from an index instead of the table (a real NetBox's database does the same with its
	// indexes); every filter is still applied to them.
	narrow      func(q url.Values) (ids []int, ok bool)
	has         func(id int) bool
	lastUpdated func(id int) time.Time // nil: the model has no last_updated (no ETag)
	render      func(c rc, id int) obj // the API's representation
	eventData   func(id int) obj       // the webhook's data (default: render without a request)
	snapshot    func(id int) obj       // serialize_object, for the change log and webhooks
	repr        func(id int) string    // str(obj): the change log's object_repr
	related     func(id int) (string, int)
	brief       []string // Meta.brief_fields; nil: ?brief does not trim

	filters  []filterDef
	search   func(id int, q string) bool
	cf       func(id int) map[string]any // custom_field_data, for cf_ filters (nil: no custom fields)
	ordering map[string]func(id int) any // the ?ordering= names the emulator serves
	meta     []metaField                 // OPTIONS: the serializer's fields

	create func(c *reqCtx, body obj) (int, bool)                // false: it has answered 400
	update func(c *reqCtx, id int, body obj, partial bool) bool // false: it has answered 400
	remove func(c *reqCtx, id int) bool                         // false: it has answered (409)
}

func (r *resource) dataFor(id int) obj {
	if r.eventData != nil {
		return r.eventData(id)
	}
	return r.render(rc{}, id)
}

// register serves a resource's routes.
func (e *Emulator) register(m *http.ServeMux, res *resource) {
	e.resources[res.objectType] = res
	list, detail := "/api/"+res.path+"/", "/api/"+res.path+"/{id}/"
	h := func(method, path string, write bool, fn func(*reqCtx)) {
		m.Handle(method+" "+path, e.api(write, fn))
	}
	h("GET", list, false, func(c *reqCtx) { c.list(res) })
	h("OPTIONS", list, false, func(c *reqCtx) { c.options(res, false) })
	h("GET", detail, false, func(c *reqCtx) { c.retrieve(res) })
	h("OPTIONS", detail, false, func(c *reqCtx) { c.options(res, true) })
	if res.readOnly {
		for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
			h(method, list, true, notAllowed)
			h(method, detail, true, notAllowed)
		}
		return
	}
	h("POST", list, true, func(c *reqCtx) { c.createAny(res) })
	h("PUT", list, true, func(c *reqCtx) { c.bulkUpdate(res, false) })
	h("PATCH", list, true, func(c *reqCtx) { c.bulkUpdate(res, true) })
	h("DELETE", list, true, func(c *reqCtx) { c.bulkDestroy(res) })
	h("PUT", detail, true, func(c *reqCtx) { c.updateOne(res, false) })
	h("PATCH", detail, true, func(c *reqCtx) { c.updateOne(res, true) })
	h("DELETE", detail, true, func(c *reqCtx) { c.destroyOne(res) })
	h("POST", detail, true, notAllowed)
}

// notAllowed is DRF's MethodNotAllowed.
func notAllowed(c *reqCtx) {
	c.detail(http.StatusMethodNotAllowed, `Method "`+c.r.Method+`" not allowed.`)
}
