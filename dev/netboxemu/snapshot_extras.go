package netboxemu

// Snapshots (serialize_object) of the extras models the emulator serves: model fields without
// the pk, foreign keys and many-to-many fields as ids, custom_field_data as custom_fields, tags
// as sorted names (NB@v4.6.8:netbox/utilities/serialization.py). Object types are
// django_content_type ids, which differ between NetBox installations: read them by key.

// contentTypeID is the id the emulator reports for an object type's ContentType.
func contentTypeID(objectType string) int {
	if id, ok := contentTypeIDs[objectType]; ok {
		return id
	}
	return 0
}

func contentTypeIDList(types []string) []any {
	out := []any{}
	for _, t := range types {
		out = append(out, contentTypeID(t))
	}
	return out
}

func (e *Emulator) snapJournal(j *journalEntry) obj {
	return obj{{"created", djangoTime(j.created)}, {"custom_fields", obj{}},
		{"assigned_object_type", contentTypeID(j.objType)}, {"assigned_object_id", j.objID},
		{"created_by", nullableID(j.createdBy)}, {"kind", j.kind}, {"comments", j.comments}, {"tags", []any{}}}
}

func (e *Emulator) snapChoiceSet(cs *choiceSet) obj {
	choices := []any{}
	for _, ch := range cs.choices {
		choices = append(choices, []any{ch[0], ch[1]})
	}
	return obj{{"created", djangoTime(cs.created)}, {"owner", nil}, {"name", cs.name},
		{"description", cs.description}, {"base_choices", ""}, {"extra_choices", choices},
		{"choice_colors", obj{}}, {"order_alphabetically", false}}
}

func (e *Emulator) snapCustomField(cf *customField) obj {
	return obj{{"created", djangoTime(cf.created)}, {"owner", nil}, {"type", cf.typ}, {"related_object_type", nil},
		{"name", cf.name}, {"label", cf.label}, {"group_name", cf.groupName}, {"description", cf.description},
		{"required", cf.required}, {"unique", false}, {"search_weight", cf.searchWeight},
		{"filter_logic", cf.filterLogic}, {"default", cf.def}, {"related_object_filter", nil}, {"weight", cf.weight},
		{"validation_minimum", nil}, {"validation_maximum", nil}, {"validation_regex", cf.validationRegex},
		{"validation_schema", nil}, {"choice_set", nullableID(cf.choiceSet)}, {"ui_visible", cf.uiVisible},
		{"ui_editable", cf.uiEditable}, {"is_cloneable", false}, {"comments", ""},
		{"object_types", contentTypeIDList(cf.objectTypes)}}
}

func (e *Emulator) snapWebhook(w *webhook) obj {
	return obj{{"created", djangoTime(w.created)}, {"custom_fields", obj{}}, {"owner", nil}, {"name", w.name},
		{"description", w.description}, {"payload_url", w.payloadURL}, {"http_method", w.httpMethod},
		{"http_content_type", w.contentType}, {"additional_headers", w.additionalHeaders}, {"body_template", ""},
		{"secret", w.secret}, {"ssl_verification", w.sslVerification}, {"ca_file_path", nil}, {"tags", []any{}}}
}

func (e *Emulator) snapEventRule(r *eventRule) obj {
	return obj{{"created", djangoTime(r.created)}, {"custom_fields", obj{}}, {"owner", nil}, {"name", r.name},
		{"description", r.description}, {"event_types", toAny(r.eventTypes)}, {"enabled", r.enabled},
		{"conditions", r.conditions}, {"action_type", "webhook"},
		{"action_object_type", contentTypeID("extras.webhook")}, {"action_object_id", r.webhook},
		{"action_data", nil}, {"comments", ""}, {"object_types", contentTypeIDList(r.objectTypes)}, {"tags", []any{}}}
}
