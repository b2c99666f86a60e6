# The NetBox configuration fleetd needs (docs/design.md §2, §7), applied from netbox-webhooks.yaml
# through NetBox's REST API with the generic REST provider. README.md says why this provider and
# what changes with another one.

terraform {
  required_version = ">= 1.6.0"
  required_providers {
    restapi = {
      source  = "Mastercard/restapi"
      version = "1.20.0"
    }
  }
}
