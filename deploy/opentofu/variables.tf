variable "netbox_url" {
  description = "NetBox's base URL, without a trailing slash (e.g. https://netbox.example.net)."
  type        = string
}

variable "netbox_token" {
  description = "A NetBox API token allowed to write custom fields, choice sets, webhooks and event rules (v2 nbt_<key>.<token> or v1)."
  type        = string
  sensitive   = true
}

variable "fleetd_url" {
  description = "Where NetBox reaches fleetd's webhooks: scheme, host and port, no trailing slash (e.g. https://spore.lan:8443, fleetd's public_url, or http://127.0.0.1:8080 with NetBox on spore). Each webhook's payload_url is this plus its path."
  type        = string
  validation {
    condition     = can(regex("^https?://[^/]+$", var.fleetd_url))
    error_message = "fleetd_url must be scheme://host[:port] with no path and no trailing slash, e.g. https://spore:8443."
  }
}

variable "webhook_secret" {
  description = "The HMAC secret NetBox signs every webhook with (X-Hook-Signature); the same value as fleetd's webhook secret file."
  type        = string
  sensitive   = true
  validation {
    condition     = length(var.webhook_secret) >= 32
    error_message = "webhook_secret must be at least 32 characters, e.g. `openssl rand -hex 32` (this root's rule: a short HMAC key can be guessed)."
  }
}

variable "webhooks_file" {
  description = "The netbox-webhooks.yaml to apply; default the one of this checkout."
  type        = string
  default     = ""
}

variable "ssl_verification" {
  description = "Whether NetBox verifies fleetd's TLS certificate when it sends a webhook."
  type        = bool
  default     = true
}
