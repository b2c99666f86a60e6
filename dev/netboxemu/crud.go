package netboxemu

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// The single-object views (NB@v4.6.8:netbox/netbox/api/viewsets/__init__.py
// NetBoxModelViewSet.create/update/destroy, ETagMixin) and the list view's pipeline:
// filters, ordering, paging, and the output parameters brief, fields and omit (BaseViewSet.field_kwargs).

// find reads the {id} of a detail route; on failure it has answered 404.
func (c *reqCtx) find(res *resource) (int, bool) {
	id, ok := c.id()
	if !ok {
		return 0, false
	}
	if !res.has(id) {
		c.detail(http.StatusNotFound, "No "+res.model+" matches the given query.")
		return 0, false
	}
	return id, true
}

// answer writes one object, with its ETag when the model has last_updated.
func (c *reqCtx) answer(res *resource, status, id int) {
	if res.lastUpdated != nil {
		c.w.Header().Set("ETag", etag(res.lastUpdated(id)))
	}
	c.write(status, c.output(res, res.render(c.rc, id)))
}

func (c *reqCtx) retrieve(res *resource) {
	if !c.formatOK() {
		return
	}
	if id, ok := c.find(res); ok {
		c.answer(res, http.StatusOK, id)
	}
}

func (c *reqCtx) ifMatchOf(res *resource, id int) bool {
	if res.lastUpdated == nil {
		return true
	}
	return c.ifMatch(res.lastUpdated(id))
}

// updateOne is PUT (partial false) or PATCH on /{id}/.
func (c *reqCtx) updateOne(res *resource, partial bool) {
	id, ok := c.find(res)
	if !ok || !c.ifMatchOf(res, id) {
		return
	}
	body := c.body()
	if body == nil {
		return
	}
	c.message = changelogMessage(body)
	if res.update(c, id, body, partial) {
		c.answer(res, http.StatusOK, id)
	}
}

func (c *reqCtx) destroyOne(res *resource) {
	id, ok := c.find(res)
	if !ok || !c.ifMatchOf(res, id) {
		return
	}
	if body, ok := c.optionalBody(); !ok {
		return
	} else if body != nil {
		c.message = changelogMessage(body)
	}
	if res.remove(c, id) {
		c.write(http.StatusNoContent, nil)
	}
}

// createAny is POST on the list endpoint: one object, or a list of them (bulk create).
func (c *reqCtx) createAny(res *resource) {
	v, ok := c.anyBody()
	if !ok {
		return
	}
	if list, isList := v.([]any); isList {
		c.bulkCreate(res, list)
		return
	}
	body := c.objectOf(v)
	if body == nil {
		return
	}
	c.message = changelogMessage(body)
	if id, ok := res.create(c, body); ok {
		c.answer(res, http.StatusCreated, id)
	}
}

// changelogMessage is the write-only changelog_message a write may carry (NetBox ≥ 4.4).
func changelogMessage(body obj) string {
	v, _ := body.get("changelog_message")
	s, _ := v.(string)
	return s
}

// list is the list view: the query's filters, then ordering, then the page.
func (c *reqCtx) list(res *resource) {
	if !c.formatOK() {
		return
	}
	q := c.r.URL.Query()
	filters, ferr := c.e.compileFilters(res, q)
	if ferr != nil {
		c.invalid(obj{{ferr.param, []any{ferr.msg}}})
		return
	}
	keep := func(id int) bool { return keepAll(filters, id) }
	var rows []int
	if cands, narrowed := narrowRows(res, q); narrowed {
		rows = slices.DeleteFunc(cands, func(id int) bool { return !keep(id) })
	} else {
		rows = res.rows(keep)
	}
	ids, ok := c.order(res, rows)
	if !ok {
		return
	}
	c.page(ids, func(id int) obj { return c.output(res, res.render(c.rc, id)) })
}

// narrowRows is the rows res.narrow gives for the query, when it gives them.
func narrowRows(res *resource, q url.Values) ([]int, bool) {
	if res.narrow == nil {
		return nil, false
	}
	return res.narrow(q)
}

func keepAll(filters []rowFilter, id int) bool {
	for _, f := range filters {
		if !f(id) {
			return false
		}
	}
	return true
}

// formatOK serves ?format=json; the browsable API (format=api) is not emulated, and DRF answers
// an unknown format with 404.
func (c *reqCtx) formatOK() bool {
	switch c.r.URL.Query().Get("format") {
	case "", "json":
		return true
	case "api":
		c.invalid(obj{{"format", []any{"The NetBox emulator does not render the browsable API; use format=json."}}})
	default:
		c.detail(http.StatusNotFound, "Not found.")
	}
	return false
}

// output applies ?fields= (only these), ?omit= (all but these) and, on GET, ?brief (the
// serializer's brief fields) to one rendered object. Unknown names are ignored, as NetBox does.
func (c *reqCtx) output(res *resource, o obj) obj {
	q := c.r.URL.Query()
	var keep []string
	switch {
	case q.Get("fields") != "":
		keep = strings.Split(q.Get("fields"), ",")
	case q.Get("omit") != "":
		omit := strings.Split(q.Get("omit"), ",")
		return slices.DeleteFunc(slices.Clone(o), func(f field) bool { return slices.Contains(omit, f.K) })
	case c.r.Method == http.MethodGet && q.Get("brief") != "" && res.brief != nil:
		keep = res.brief
	default:
		return o
	}
	return slices.DeleteFunc(slices.Clone(o), func(f field) bool { return !slices.Contains(keep, f.K) })
}
