package netboxemu

import (
	"strconv"
	"strings"
	"time"
)

// Constructors for filter declarations, named after the django-filter classes NetBox declares.

func numberF(name string, value func(int) any) filterDef {
	return filterDef{name: name, kind: fNumber, value: value}
}

func charF(name string, value func(int) any) filterDef {
	return filterDef{name: name, kind: fChar, value: value}
}

func boolF(name string, value func(int) any) filterDef {
	return filterDef{name: name, kind: fBool, value: value, single: true}
}

func timeF(name string, value func(int) any) filterDef {
	return filterDef{name: name, kind: fTime, value: value}
}

// choiceF is MultipleChoiceFilter(choices=…): its values must be choices.
func choiceF(name string, choices map[string]string, value func(int) any) filterDef {
	return filterDef{name: name, kind: fChoice, noNull: true, value: value, choices: func() []string {
		out := make([]string, 0, len(choices))
		for k := range choices {
			out = append(out, k)
		}
		return out
	}}
}

// refID is ModelMultipleChoiceFilter by primary key; value is the row's related id (0: none).
func refID(name string, exists func(id int) bool, value func(int) int) filterDef {
	return filterDef{name: name, kind: fRef, value: func(id int) any { return nullableID(value(id)) },
		exists: func(v string) bool { n, err := strconv.Atoi(v); return err == nil && exists(n) }}
}

// refKey is ModelMultipleChoiceFilter(to_field_name=…): by slug, name or another unique key.
func refKey(name string, exists func(key string) bool, value func(int) any) filterDef {
	return filterDef{name: name, kind: fRef, value: value, exists: exists}
}

func typeF(name string, value func(int) any) filterDef {
	return filterDef{name: name, kind: fType, value: value}
}

// methodF is a filter with its own method (no lookups).
func methodF(name string, match func(id int, values []string) bool) filterDef {
	return filterDef{name: name, kind: fMethod, match: match}
}

// changeLogged are ChangeLoggedModelFilterSet's created and last_updated.
func changeLogged(created, lastUpdated func(int) time.Time) []filterDef {
	return []filterDef{
		timeF("created", func(id int) any { return created(id) }),
		timeF("last_updated", func(id int) any { return lastUpdated(id) }),
	}
}

// textOrNil is a nullable text column.
func textOrNil(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// containsFold is Django's icontains (PostgreSQL UPPER(…) LIKE UPPER(…)).
func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToUpper(s), strings.ToUpper(sub))
}

// anyContainsFold is a search over several columns (Q(a__icontains=v) | Q(b__icontains=v) …).
func anyContainsFold(v string, cols ...string) bool {
	for _, c := range cols {
		if containsFold(c, v) {
			return true
		}
	}
	return false
}

// slugExists and idExists take the table through a getter: a rolled-back bulk write replaces
// the database, so no closure may keep a table of its own.
func slugExists(table func() map[int]*named) func(string) bool {
	return func(slug string) bool {
		for _, n := range table() {
			if n.slug == slug {
				return true
			}
		}
		return false
	}
}

func idExists[T any](table func() map[int]T) func(int) bool {
	return func(id int) bool { _, ok := table()[id]; return ok }
}

// ordering names that every model serves: id, created, last_updated.
func baseOrdering(created, lastUpdated func(int) time.Time) map[string]func(int) any {
	return map[string]func(int) any{
		"id":           func(id int) any { return id },
		"created":      func(id int) any { return created(id) },
		"last_updated": func(id int) any { return lastUpdated(id) },
	}
}
