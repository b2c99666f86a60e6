package fleet_test

import (
	"math/rand"
	"net/netip"
	"sync"
	"time"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/render"
)

// testService is a service on in-memory ports with a clock the test controls.
type testService struct {
	*fleet.Service
	clock *fleettest.Clock
}

var testEpoch = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// sharedRenderer renders the fleettest catalog's classes for the service tests (one Talos secrets
// bundle for all of them: generating one takes a while): the real renderer, package render.
var sharedRenderer = sync.OnceValue(func() *render.Renderer {
	clock := fleettest.NewClock(testEpoch)
	sec, err := render.GenerateTalosSecrets(clock)
	if err != nil {
		panic(err)
	}
	r, err := render.New(render.Config{TalosSecrets: sec, TalosVersion: "v1.11", ClusterName: "folly",
		ClusterEndpoint: "https://10.0.0.2:6443", DNS: []netip.Addr{netip.MustParseAddr("10.0.0.1")},
		Gateway: netip.MustParseAddr("10.0.0.1"), Clock: clock, Random: rand.New(rand.NewSource(2))})
	if err != nil {
		panic(err)
	}
	return r
})

// newTestService is a service on inv (its saves stamped by the service's clock, when it is the
// in-memory inventory), with fleettest's seal keys and NetBox user.
func newTestService(inv fleet.NetBox, inst fleet.Installer) testService {
	return newTestServiceWith(inv, inst, fleettest.NewClock(testEpoch), fleet.Attestation{})
}

// newTestServiceWith is newTestService on the given clock, with the given attestation wiring.
func newTestServiceWith(inv fleet.NetBox, inst fleet.Installer, clock *fleettest.Clock, a fleet.Attestation) testService {
	if m, ok := inv.(*fleettest.NetBox); ok && m.Clock == nil {
		m.Clock = clock
	}
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ConfigTTL: time.Hour, ServiceUser: fleettest.ServiceUser}, fleet.Deps{Seal: fleettest.SealKeys(), NetBox: inv, Installer: inst,
		Catalog: fleettest.Catalog(), Clock: clock, Renderer: sharedRenderer(), Random: rand.New(rand.NewSource(1)), Attest: a})
	if err != nil {
		panic(err)
	}
	return testService{Service: s, clock: clock}
}

const attestedUUID = "4c4c4544-0042-3510-8052-b4c04f4e3232"

// attested gives a provision's device the identity material its attestation records, issued at
// testEpoch for the service's one-hour TTL.
func attested(d fleet.Device) fleet.Device {
	return fleettest.Attested(d, attestedUUID, testEpoch, time.Hour)
}
