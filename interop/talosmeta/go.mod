module github.com/folly-infra/fleetd/interop/talosmeta

go 1.24.5
