package netboxemu

import (
	"slices"
	"time"
)

// Journal entries, custom fields, choice sets, webhooks and event rules: JournalEntryFilterSet,
// CustomFieldFilterSet, CustomFieldChoiceSetFilterSet, WebhookFilterSet and EventRuleFilterSet
// (NB@v4.6.8:netbox/extras/filtersets.py) for the fields the emulator stores.

func (e *Emulator) journalResource() *resource {
	j := func(id int) *journalEntry { return e.db.journal[id] }
	created := func(id int) time.Time { return j(id).created }
	updated := func(id int) time.Time { return j(id).lastUpdated }
	users := func() map[int]*user { return e.db.users }
	filters := []filterDef{
		numberF("id", func(id int) any { return id }),
		typeF("assigned_object_type", func(id int) any { return j(id).objType }),
		numberF("assigned_object_id", func(id int) any { return j(id).objID }),
		{name: "created", kind: fRange, value: func(id int) any { return created(id) }},
		timeF("last_updated", func(id int) any { return updated(id) }),
		choiceF("kind", journalKindLabels, func(id int) any { return j(id).kind }),
		refID("created_by_id", idExists(users), func(id int) int { return j(id).createdBy }),
		refKey("created_by", func(name string) bool { return e.db.userByName(name) != nil }, func(id int) any {
			if u, ok := e.db.users[j(id).createdBy]; ok {
				return u.username
			}
			return nil
		}),
	}
	return &resource{
		path: "extras/journal-entries", objectType: "extras.journalentry", verbose: "Journal Entry", model: "JournalEntry",
		rows: func(keep func(int) bool) []int {
			return sortedKept(e.db.journal, func(a, b *journalEntry) bool { return a.created.After(b.created) }, keep)
		},
		has:         idExists(func() map[int]*journalEntry { return e.db.journal }),
		lastUpdated: updated,
		render:      func(c rc, id int) obj { return e.renderJournal(c, j(id)) },
		snapshot:    func(id int) obj { return e.snapJournal(j(id)) },
		repr:        func(id int) string { return journalDisplay(j(id)) },
		brief:       []string{"id", "url", "display", "created"},
		filters:     filters,
		search:      func(id int, q string) bool { return containsFold(j(id).comments, q) },
		cf:          func(int) map[string]any { return nil },
		ordering:    baseOrdering(created, updated),
		meta:        journalMeta,
		create:      e.newJournal,
		update:      e.saveJournal,
		remove:      e.removeJournal,
	}
}

func (e *Emulator) customFieldResource() *resource {
	cf := func(id int) *customField { return e.db.customFields[id] }
	created := func(id int) time.Time { return cf(id).created }
	updated := func(id int) time.Time { return cf(id).lastUpdated }
	sets := func() map[int]*choiceSet { return e.db.choiceSets }
	ordering := baseOrdering(created, updated)
	ordering["name"] = func(id int) any { return cf(id).name }
	ordering["weight"] = func(id int) any { return cf(id).weight }
	filters := append([]filterDef{
		numberF("id", func(id int) any { return id }),
		charF("name", func(id int) any { return cf(id).name }),
		charF("label", func(id int) any { return cf(id).label }),
		charF("group_name", func(id int) any { return cf(id).groupName }),
		charF("description", func(id int) any { return cf(id).description }),
		charF("validation_regex", func(id int) any { return cf(id).validationRegex }),
		choiceF("type", cfTypeLabels, func(id int) any { return cf(id).typ }),
		{name: "filter_logic", kind: fChoice, single: true, noNull: true, value: func(id int) any { return cf(id).filterLogic },
			choices: func() []string { return keys(filterLogicLabels) }},
		{name: "ui_visible", kind: fChoice, single: true, noNull: true, value: func(id int) any { return cf(id).uiVisible },
			choices: func() []string { return keys(uiVisibleLabels) }},
		{name: "ui_editable", kind: fChoice, single: true, noNull: true, value: func(id int) any { return cf(id).uiEditable },
			choices: func() []string { return keys(uiEditableLabels) }},
		boolF("required", func(id int) any { return cf(id).required }),
		boolF("unique", func(int) any { return false }),
		boolF("is_cloneable", func(int) any { return false }),
		numberF("weight", func(id int) any { return cf(id).weight }),
		numberF("search_weight", func(id int) any { return cf(id).searchWeight }),
		typeF("object_type", func(id int) any { return toAny(cf(id).objectTypes) }),
		refID("choice_set_id", idExists(sets), func(id int) int { return cf(id).choiceSet }),
		refKey("choice_set", func(name string) bool { return e.choiceSetNamed(name) != nil }, func(id int) any {
			if s, ok := e.db.choiceSets[cf(id).choiceSet]; ok {
				return s.name
			}
			return nil
		}),
	}, changeLogged(created, updated)...)
	return &resource{
		path: "extras/custom-fields", objectType: "extras.customfield", verbose: "Custom Field", model: "CustomField",
		rows: func(keep func(int) bool) []int {
			return sortedKept(e.db.customFields, func(a, b *customField) bool {
				if a.groupName != b.groupName {
					return a.groupName < b.groupName
				}
				if a.weight != b.weight {
					return a.weight < b.weight
				}
				return a.name < b.name
			}, keep)
		},
		has:         idExists(func() map[int]*customField { return e.db.customFields }),
		lastUpdated: updated,
		render:      func(c rc, id int) obj { return e.renderCustomField(c, cf(id)) },
		snapshot:    func(id int) obj { return e.snapCustomField(cf(id)) },
		repr:        func(id int) string { return cfDisplay(cf(id)) },
		brief:       []string{"id", "url", "display", "name", "description"},
		filters:     filters,
		search: func(id int, q string) bool {
			return anyContainsFold(q, cf(id).name, cf(id).label, cf(id).groupName, cf(id).description)
		},
		ordering: ordering,
		meta:     customFieldMeta,
		create: func(c *reqCtx, body obj) (int, bool) {
			return apiCreate(c, "extras.customfield", body, e.addCustomField, func(id int) obj { return e.snapCustomField(cf(id)) })
		},
		update: e.saveCustomField,
		remove: e.removeCustomField,
	}
}

// saveCustomField also carries a rename or a dropped object type into the objects' data.
func (e *Emulator) saveCustomField(c *reqCtx, id int, body obj, partial bool) bool {
	before := *e.db.customFields[id]
	ok := apiSave(c, e.resources["extras.customfield"], e.db.customFields[id], id, body, partial,
		func(x *customField, in *input) obj { return e.applyCustomField(x, in, false) },
		func(x *customField) { x.lastUpdated = c.touch(x.lastUpdated) })
	if ok {
		e.reshapeData(&before, e.db.customFields[id])
	}
	return ok
}

func (e *Emulator) choiceSetNamed(name string) *choiceSet {
	for _, cs := range e.db.choiceSets {
		if cs.name == name {
			return cs
		}
	}
	return nil
}

func (e *Emulator) choiceSetResource() *resource {
	cs := func(id int) *choiceSet { return e.db.choiceSets[id] }
	created := func(id int) time.Time { return cs(id).created }
	updated := func(id int) time.Time { return cs(id).lastUpdated }
	ordering := baseOrdering(created, updated)
	ordering["name"] = func(id int) any { return cs(id).name }
	filters := append([]filterDef{
		numberF("id", func(id int) any { return id }),
		charF("name", func(id int) any { return cs(id).name }),
		charF("description", func(id int) any { return cs(id).description }),
		boolF("order_alphabetically", func(int) any { return false }),
		methodF("choice", func(id int, vs []string) bool { // extra_choices__overlap
			return slices.ContainsFunc(cs(id).choices, func(p [2]string) bool {
				return slices.Contains(vs, p[0]) || slices.Contains(vs, p[1])
			})
		}),
	}, changeLogged(created, updated)...)
	return &resource{
		path: "extras/custom-field-choice-sets", objectType: "extras.customfieldchoiceset",
		verbose: "Custom Field Choice Set", model: "CustomFieldChoiceSet",
		rows: func(keep func(int) bool) []int {
			return sortedKept(e.db.choiceSets, func(a, b *choiceSet) bool { return a.name < b.name }, keep)
		},
		has:         idExists(func() map[int]*choiceSet { return e.db.choiceSets }),
		lastUpdated: updated,
		render:      func(c rc, id int) obj { return e.renderChoiceSet(c, cs(id)) },
		snapshot:    func(id int) obj { return e.snapChoiceSet(cs(id)) },
		repr:        func(id int) string { return cs(id).name },
		brief:       []string{"id", "url", "display", "name", "description", "choices_count"},
		filters:     filters,
		search:      func(id int, q string) bool { return anyContainsFold(q, cs(id).name, cs(id).description) },
		ordering:    ordering,
		meta:        choiceSetMeta,
		create: func(c *reqCtx, body obj) (int, bool) {
			return apiCreate(c, "extras.customfieldchoiceset", body, e.addChoiceSet, func(id int) obj { return e.snapChoiceSet(cs(id)) })
		},
		update: func(c *reqCtx, id int, body obj, partial bool) bool {
			return apiSave(c, e.resources["extras.customfieldchoiceset"], cs(id), id, body, partial,
				func(x *choiceSet, in *input) obj { return e.applyChoiceSet(x, in) },
				func(x *choiceSet) { x.lastUpdated = c.touch(x.lastUpdated) })
		},
		remove: e.removeChoiceSet,
	}
}
