package netboxemu

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Paging and ordering of list views: NetBox's NetBoxPagination (NB@v4.6.8:netbox/netbox/api/
// pagination.py) in offset mode (count, next, previous; PAGINATE_COUNT 50, MAX_PAGE_SIZE 1000,
// limit=0 means MAX_PAGE_SIZE, a bad limit is ignored) and in cursor mode (start=<pk>: pk >=
// start, ordered by pk, count null, no previous), and DRF's OrderingFilter (?ordering=a,-b).

const (
	paginateCount = 50
	maxPageSize   = 1000
)

// page answers a list request with one page of ids, each rendered by render.
func (c *reqCtx) page(ids []int, render func(id int) obj) {
	q := c.r.URL.Query()
	limit := paginateCount
	if l, err := strconv.Atoi(q.Get("limit")); err == nil && l >= 0 {
		limit = min(l, maxPageSize)
		if l == 0 {
			limit = maxPageSize
		}
	}
	if _, cursor := q["start"]; cursor {
		c.cursorPage(ids, limit, render)
		return
	}
	offset := 0
	if o, err := strconv.Atoi(q.Get("offset")); err == nil && o > 0 {
		offset = o
	}
	var next, prev any
	if offset+limit < len(ids) {
		next = c.pageLink(map[string]int{"limit": limit, "offset": offset + limit})
	}
	if offset > 0 {
		prev = c.pageLink(map[string]int{"limit": limit, "offset": max(offset-limit, 0)})
	}
	c.write(http.StatusOK, obj{{"count", len(ids)}, {"next", next}, {"previous", prev},
		{"results", c.renderAll(ids[min(offset, len(ids)):min(offset+limit, len(ids))], render)}})
}

func (c *reqCtx) cursorPage(ids []int, limit int, render func(id int) obj) {
	q := c.r.URL.Query()
	start, err := strconv.Atoi(q.Get("start"))
	switch {
	case err != nil || start < 0:
		c.invalid(obj{{"non_field_errors", []any{"Invalid 'start' parameter: must be a non-negative integer."}}})
		return
	case q.Has("offset"):
		c.invalid(obj{{"non_field_errors", []any{"'start' and 'offset' are mutually exclusive."}}})
		return
	case q.Has("ordering"):
		c.invalid(obj{{"non_field_errors", []any{"Ordering cannot be specified in conjunction with cursor-based pagination."}}})
		return
	}
	var sel []int
	for _, id := range ids {
		if id >= start {
			sel = append(sel, id)
		}
	}
	slices.Sort(sel)
	sel = sel[:min(limit, len(sel))]
	var next any
	if len(sel) == limit && limit > 0 {
		next = c.pageLink(map[string]int{"start": sel[len(sel)-1] + 1, "limit": limit, "offset": -1})
	}
	c.write(http.StatusOK, obj{{"count", nil}, {"next", next}, {"previous", nil}, {"results", c.renderAll(sel, render)}})
}

func (c *reqCtx) renderAll(ids []int, render func(id int) obj) []any {
	results := []any{}
	c.rendered += len(ids)
	fn := func() {
		for _, id := range ids {
			results = append(results, render(id))
		}
	}
	if len(ids) >= indexFrom {
		c.e.withIndex(fn)
	} else {
		fn()
	}
	return results
}

// pageLink is the request's absolute URL with parameters replaced (a negative value removes
// one), query parameters sorted as DRF's replace_query_param leaves them.
func (c *reqCtx) pageLink(set map[string]int) string {
	u := *c.r.URL
	v := u.Query()
	for k, n := range set {
		if n < 0 || (k == "offset" && n == 0) {
			v.Del(k)
		} else {
			v.Set(k, strconv.Itoa(n))
		}
	}
	u.RawQuery = v.Encode()
	return c.rc.base + u.RequestURI()
}

// order applies ?ordering=: comma-separated names, "-" for descending; the model's ordering
// breaks ties. A name the emulator cannot order by is refused (DRF drops names that are not
// serializer fields, which the emulator cannot tell apart from ones it does not implement).
func (c *reqCtx) order(res *resource, ids []int) ([]int, bool) {
	raw := c.r.URL.Query().Get("ordering")
	if raw == "" {
		return ids, true
	}
	type key struct {
		fn   func(int) any
		desc bool
	}
	var keys []key
	for _, term := range strings.Split(raw, ",") {
		name := strings.TrimPrefix(strings.TrimSpace(term), "-")
		fn, ok := res.ordering[name]
		if !ok {
			c.invalid(obj{{"ordering", []any{fmt.Sprintf("The NetBox emulator does not implement ordering /api/%s/ by %q.", res.path, name)}}})
			return nil, false
		}
		keys = append(keys, key{fn, strings.HasPrefix(strings.TrimSpace(term), "-")})
	}
	out := slices.Clone(ids)
	slices.SortStableFunc(out, func(a, b int) int {
		for _, k := range keys {
			if r := compareValues(k.fn(a), k.fn(b)); r != 0 {
				if k.desc {
					return -r
				}
				return r
			}
		}
		return 0
	})
	return out, true
}

// compareValues orders two field values; null sorts last ascending (PostgreSQL's NULLS LAST).
func compareValues(a, b any) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	switch x := a.(type) {
	case string:
		return strings.Compare(x, b.(string))
	case int:
		return x - b.(int)
	case bool:
		return boolInt(x) - boolInt(b.(bool))
	case time.Time:
		return x.Compare(b.(time.Time))
	}
	return 0
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
