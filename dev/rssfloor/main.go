// Command rssfloor is the memory floor of fleetd's code: it links every package fleetd's main
// imports, lets their initialisation run, prints its pid and sleeps. Its resident memory is what
// the linked code costs before fleetd does anything, which TestFleetdIdleMemory (dev/stack)
// reports beside fleetd's own at rest (docs/operate.md, "Memory"). TestFloorImportsFleetd keeps
// what it links exactly what fleetd's binary links.
package main

import (
	"fmt"
	"os"
	"time"

	_ "github.com/go-logr/zerologr"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/collectors"
	_ "github.com/rs/zerolog"
	_ "golang.org/x/sync/errgroup"
	_ "k8s.io/klog/v2"

	_ "github.com/folly-infra/fleetd/agent"
	_ "github.com/folly-infra/fleetd/api"
	_ "github.com/folly-infra/fleetd/attest"
	_ "github.com/folly-infra/fleetd/cli"
	_ "github.com/folly-infra/fleetd/cloudinit"
	_ "github.com/folly-infra/fleetd/config"
	_ "github.com/folly-infra/fleetd/fleet"
	_ "github.com/folly-infra/fleetd/handlers"
	_ "github.com/folly-infra/fleetd/kea"
	_ "github.com/folly-infra/fleetd/netbox"
	_ "github.com/folly-infra/fleetd/pki"
	_ "github.com/folly-infra/fleetd/render"
	_ "github.com/folly-infra/fleetd/spire"
	_ "github.com/folly-infra/fleetd/webhook"
	_ "github.com/folly-infra/fleetd/workflows"
	_ "github.com/folly-infra/fleetd/workload"
)

func main() {
	fmt.Println(os.Getpid())
	time.Sleep(24 * time.Hour)
}
