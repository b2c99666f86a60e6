output "webhook_ids" {
  description = "NetBox's id of each webhook, by name."
  value       = { for name, w in restapi_object.webhook : name => tonumber(w.id) }
}

output "event_rule_ids" {
  description = "NetBox's id of each event rule, by name."
  value       = { for name, r in restapi_object.event_rule : name => tonumber(r.id) }
}
