locals {
  file = var.webhooks_file != "" ? var.webhooks_file : "${path.module}/../../netbox-webhooks.yaml"
  nb   = yamldecode(file(local.file))

  choice_sets   = { for c in local.nb.choice_sets : c.name => c }
  custom_fields = { for f in local.nb.custom_fields : f.name => f }
  webhooks      = { for w in local.nb.webhooks : w.name => w }
  event_rules   = { for r in local.nb.event_rules : r.name => r }

  # NetBox's list endpoints; each object is at <list><id>/.
  api = {
    choice_set   = "/api/extras/custom-field-choice-sets/"
    custom_field = "/api/extras/custom-fields/"
    webhook      = "/api/extras/webhooks/"
    event_rule   = "/api/extras/event-rules/"
  }
}

# NetBox answers every write with the object (write_returns_object), and its routes end in a
# slash: each object is read, updated and deleted at <list path><id>/. Updates are PATCHes of
# the keys in data, so fields this root does not set keep what NetBox or its UI gave them.
provider "restapi" {
  uri                  = var.netbox_url
  write_returns_object = true
  update_method        = "PATCH"
  id_attribute         = "id"
  headers = {
    Authorization = "Token ${var.netbox_token}"
    Content-Type  = "application/json"
    Accept        = "application/json"
  }
}

resource "restapi_object" "choice_set" {
  for_each     = local.choice_sets
  path         = local.api.choice_set
  read_path    = "${local.api.choice_set}{id}/"
  update_path  = "${local.api.choice_set}{id}/"
  destroy_path = "${local.api.choice_set}{id}/"
  data = jsonencode({
    name          = each.key
    description   = try(each.value.description, "")
    extra_choices = each.value.extra_choices
  })
}

resource "restapi_object" "custom_field" {
  for_each     = local.custom_fields
  path         = local.api.custom_field
  read_path    = "${local.api.custom_field}{id}/"
  update_path  = "${local.api.custom_field}{id}/"
  destroy_path = "${local.api.custom_field}{id}/"
  data = jsonencode({
    name             = each.key
    label            = try(each.value.label, "")
    type             = each.value.type
    object_types     = each.value.object_types
    group_name       = try(each.value.group_name, "")
    weight           = try(each.value.weight, 100)
    description      = try(each.value.description, "")
    required         = try(each.value.required, false)
    default          = try(each.value.default, null)
    ui_visible       = try(each.value.ui_visible, "always")
    ui_editable      = try(each.value.ui_editable, "yes")
    validation_regex = try(each.value.validation_regex, "")
    choice_set       = try(tonumber(restapi_object.choice_set[each.value.choice_set].id), null)
  })
}

resource "restapi_object" "webhook" {
  for_each     = local.webhooks
  path         = local.api.webhook
  read_path    = "${local.api.webhook}{id}/"
  update_path  = "${local.api.webhook}{id}/"
  destroy_path = "${local.api.webhook}{id}/"
  data = jsonencode({
    name              = each.key
    description       = try(each.value.description, "")
    payload_url       = "${var.fleetd_url}${each.value.path}"
    http_method       = try(each.value.http_method, "POST")
    http_content_type = try(each.value.http_content_type, "application/json")
    secret            = try(each.value.signed, true) ? var.webhook_secret : ""
    ssl_verification  = var.ssl_verification
  })
}

resource "restapi_object" "event_rule" {
  for_each     = local.event_rules
  path         = local.api.event_rule
  read_path    = "${local.api.event_rule}{id}/"
  update_path  = "${local.api.event_rule}{id}/"
  destroy_path = "${local.api.event_rule}{id}/"
  data = jsonencode({
    name               = each.key
    description        = try(each.value.description, "")
    object_types       = each.value.object_types
    event_types        = each.value.event_types
    enabled            = try(each.value.enabled, true)
    conditions         = try(each.value.conditions, null)
    action_type        = "webhook"
    action_object_type = "extras.webhook"
    action_object_id   = tonumber(restapi_object.webhook[each.value.webhook].id)
  })
}
