package netboxemu

// The serializer fields each resource's OPTIONS describes, in the serializers' order
// (NB@v4.6.8 DeviceSerializer, InterfaceSerializer, MACAddressSerializer, IPAddressSerializer,
// JournalEntrySerializer, CustomFieldSerializer, CustomFieldChoiceSetSerializer,
// WebhookSerializer, EventRuleSerializer, ObjectChangeSerializer). Labels are DRF's default
// (the name, capitalized) where NetBox has a verbose name of its own; choices list what the
// emulator accepts (for interface types, a subset of NetBox's).

var (
	deviceStatusChoices = choicesOf(deviceStatusLabels, "offline", "active", "planned", "staged", "failed",
		"inventory", "decommissioning")
	faceChoices    = choicesOf(map[string]string{"front": "Front", "rear": "Rear"}, "front", "rear")
	airflowChoices = choicesOf(map[string]string{"front-to-rear": "Front to rear", "rear-to-front": "Rear to front",
		"left-to-right": "Left to right", "right-to-left": "Right to left", "side-to-rear": "Side to rear",
		"rear-to-side": "Rear to side", "bottom-to-top": "Bottom to top", "top-to-bottom": "Top to bottom",
		"passive": "Passive", "mixed": "Mixed"}, "front-to-rear", "rear-to-front", "left-to-right", "right-to-left",
		"side-to-rear", "rear-to-side", "bottom-to-top", "top-to-bottom", "passive", "mixed")
	ipStatusChoices = choicesOf(ipStatusLabels, "active", "reserved", "deprecated", "dhcp", "slaac")
	ipRoleChoices   = choicesOf(map[string]string{"loopback": "Loopback", "secondary": "Secondary",
		"anycast": "Anycast", "vip": "VIP", "vrrp": "VRRP", "hsrp": "HSRP", "glbp": "GLBP", "carp": "CARP"},
		"loopback", "secondary", "anycast", "vip", "vrrp", "hsrp", "glbp", "carp")
	kindChoices   = choicesOf(journalKindLabels, "info", "success", "warning", "danger")
	cfTypeChoices = choicesOf(cfTypeLabels, "text", "longtext", "integer", "decimal", "boolean", "date", "datetime",
		"url", "json", "select", "multiselect")
)

var deviceMeta = metaOf(metaHead, []metaField{mText("name", 64, false), mReq("device_type", "nested object"),
	mReq("role", "nested object"), mRW("tenant", "nested object"), mRW("platform", "nested object"),
	mText("serial", 50, false), mText("asset_tag", 50, false), mReq("site", "nested object"),
	mRW("location", "nested object"), mRW("rack", "nested object"), mRW("position", "decimal"),
	mPick("face", false, faceChoices), mRW("latitude", "decimal"), mRW("longitude", "decimal"),
	mRO("parent_device", "field"), mPick("status", false, deviceStatusChoices), mPick("airflow", false, airflowChoices),
	mRO("primary_ip", "nested object"), mRW("primary_ip4", "nested object"), mRW("primary_ip6", "nested object"),
	mRW("oob_ip", "nested object"), mRW("cluster", "nested object"), mRW("virtual_chassis", "nested object"),
	mRW("vc_position", "integer"), mRW("vc_priority", "integer"), mText("description", 200, false),
	mRW("owner", "nested object"), mRW("comments", "string"), mRW("config_template", "nested object"),
	mRW("local_context_data", "json"), mRW("tags", "list"), mRW("custom_fields", "field")}, metaTail)

var interfaceMeta = metaOf(metaHead, []metaField{mReq("device", "nested object"), mRW("module", "nested object"),
	mText("name", 64, true), mText("label", 64, false),
	mPick("type", true, choicesOf(interfaceTypeLabels)), mRW("enabled", "boolean"),
	mRW("parent", "nested object"), mRW("bridge", "nested object"), mRW("lag", "nested object"), mRW("mtu", "integer"),
	mRO("mac_address", "string"), mRW("primary_mac_address", "nested object"), mRO("mac_addresses", "list"),
	mRW("speed", "integer"), mRW("mgmt_only", "boolean"), mText("description", 200, false),
	mRW("mark_connected", "boolean"), mRW("tags", "list"), mRW("custom_fields", "field")}, metaTail)

var macMeta = metaOf(metaHead, []metaField{mText("mac_address", 0, true),
	mRW("assigned_object_type", "field"), mRW("assigned_object_id", "integer"), mRO("assigned_object", "field"),
	mText("description", 200, false), mRW("owner", "nested object"), mRW("comments", "string"),
	mRW("tags", "list"), mRW("custom_fields", "field")}, metaTail)

var ipMeta = metaOf(metaHead, []metaField{mRO("family", "field"), mText("address", 0, true),
	mRW("vrf", "nested object"), mRW("tenant", "nested object"), mPick("status", false, ipStatusChoices),
	mPick("role", false, ipRoleChoices), mRW("assigned_object_type", "field"), mRW("assigned_object_id", "integer"),
	mRO("assigned_object", "field"), mRW("nat_inside", "nested object"), mRO("nat_outside", "list"),
	mText("dns_name", 255, false), mText("description", 200, false), mRW("owner", "nested object"),
	mRW("comments", "string"), mRW("tags", "list"), mRW("custom_fields", "field")}, metaTail)

var journalMeta = metaOf(metaHead, []metaField{mReq("assigned_object_type", "field"),
	mReq("assigned_object_id", "integer"), mRO("assigned_object", "field"), mRO("created", "datetime"),
	mRW("created_by", "field"), mPick("kind", false, kindChoices), mReq("comments", "string"),
	mRW("tags", "list"), mRW("custom_fields", "field"), mRO("last_updated", "datetime")})

var customFieldMeta = metaOf(metaHead, []metaField{mReq("object_types", "field"), mPick("type", true, cfTypeChoices),
	mRW("related_object_type", "field"), mRO("data_type", "field"), mText("name", 50, true),
	mText("label", 50, false), mText("group_name", 50, false), mText("description", 200, false),
	mRW("required", "boolean"), mRW("unique", "boolean"), mRW("search_weight", "integer"),
	mPick("filter_logic", false, choicesOf(filterLogicLabels, "disabled", "loose", "exact")),
	mPick("ui_visible", false, choicesOf(uiVisibleLabels, "always", "if-set", "hidden")),
	mPick("ui_editable", false, choicesOf(uiEditableLabels, "yes", "no", "hidden")),
	mRW("is_cloneable", "boolean"), mRW("default", "json"), mRW("related_object_filter", "json"),
	mRW("weight", "integer"), mRW("validation_minimum", "decimal"), mRW("validation_maximum", "decimal"),
	mText("validation_regex", 500, false), mRW("validation_schema", "json"), mRW("choice_set", "nested object"),
	mRW("owner", "nested object"), mRW("comments", "string")}, metaTail)

var choiceSetMeta = metaOf(metaHead, []metaField{mText("name", 100, true), mText("description", 200, false),
	mPick("base_choices", false, choicesOf(map[string]string{"IATA": "IATA (Airport codes)",
		"ISO_3166": "ISO 3166 (Country codes)", "UN_LOCODE": "UN/LOCODE (Location codes)"}, "IATA", "ISO_3166", "UN_LOCODE")),
	mRW("extra_choices", "list"), mRW("order_alphabetically", "boolean"), mRO("choices_count", "field"),
	mRW("owner", "nested object")}, metaTail)

var webhookMeta = metaOf(metaHead, []metaField{mText("name", 150, true), mText("description", 200, false),
	mText("payload_url", 500, true), mPick("http_method", false, choicesOf(httpMethods, "GET", "POST", "PUT", "PATCH", "DELETE")),
	mText("http_content_type", 100, false), mRW("additional_headers", "string"), mRW("body_template", "string"),
	mText("secret", 255, false), mRW("ssl_verification", "boolean"), mText("ca_file_path", 4096, false),
	mRW("owner", "nested object"), mRW("custom_fields", "field"), mRW("tags", "list")}, metaTail)

var eventRuleMeta = metaOf(metaHead, []metaField{mReq("object_types", "field"), mText("name", 150, true),
	mRW("enabled", "boolean"), {name: "event_types", typ: "multiple choice", required: true, choices: eventTypeChoices},
	mRW("conditions", "json"),
	mPick("action_type", true, choicesOf(map[string]string{"webhook": "Webhook", "script": "Script",
		"notification": "Notification"}, "webhook", "script", "notification")),
	mReq("action_object_type", "field"), mRW("action_object_id", "integer"), mRO("action_object", "field"),
	mText("description", 200, false), mRW("owner", "nested object"), mRW("comments", "string"),
	mRW("custom_fields", "field"), mRW("tags", "list")}, metaTail)

var changeMeta = metaOf(metaHead, []metaField{mRO("time", "datetime"), mRO("user", "nested object"),
	mRO("user_name", "string"), mRO("request_id", "string"), mRO("action", "field"),
	mRO("changed_object_type", "field"), mRO("changed_object_id", "integer"), mRO("changed_object", "field"),
	mRO("object_repr", "string"), mRO("message", "string"), mRO("prechange_data", "json"),
	mRO("postchange_data", "json")})

func eventTypeChoices() [][2]string {
	labels := map[string]string{"object_created": "Object created", "object_updated": "Object updated",
		"object_deleted": "Object deleted", "job_started": "Job started", "job_completed": "Job completed",
		"job_failed": "Job failed", "job_errored": "Job errored"}
	return choicesOf(labels, "object_created", "object_updated", "object_deleted", "job_started",
		"job_completed", "job_failed", "job_errored")()
}
