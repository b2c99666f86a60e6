// Not built in this directory: scripts/tools.sh copies main.go into a copy of Talos's own module
// (github.com/siderolabs/talos v1.11.5) and builds it there, where it may import Talos's internal
// META packages. This go.mod only keeps the program out of fleetd's module, whose ./... would
// otherwise try to build it; make vet and check-drift leave the directory alone for that reason.
module github.com/folly-infra/fleetd/interop/talosmeta

go 1.24.5
