// Package handlerstest runs the real fleetd handlers and fleet service in a test, on in-memory
// NetBox and Tinkerbell (fleet/fleettest) with in-memory CAs, so that the real agent (`fleetd
// enroll`, `fleetd boot-check`) can be run against it: the enrollment and boot-check tests and the
// SPIRE interoperability module use it.
package handlerstest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers"
	"github.com/folly-infra/fleetd/pki"
	"github.com/folly-infra/fleetd/render"
	"github.com/folly-infra/fleetd/webhook"
)

// WebhookSecret is the secret the fleetd under test verifies NetBox's webhooks with.
const WebhookSecret = "s"

// Config says what the fleetd under test knows.
type Config struct {
	Catalog fleet.Catalog // default fleettest.Catalog()
	// Cluster is the workload cluster (fleet.Deps.Cluster); nil: none, so no class may join.
	Cluster  fleet.Cluster
	Devices  []fleet.Device // NetBox's devices
	EKPolicy attest.EKPolicy
	EKBundle []byte // manufacturer CAs, for hash+cert
	// BootPolicy is the HookOS boots that may enroll; default: the boot of every recorded event
	// log of attest/eventlogs (RecordedBoots).
	BootPolicy    *attest.BootPolicy
	TokenLifetime time.Duration // enrollment tokens and boot-check nonces; default one minute
	// TokenKey seals both; default all zeros (every fleetd under test opens another's tokens, as
	// instances of one fleet do). A test of a token from another fleet sets its own.
	TokenKey []byte
	// Gateway is the nodes' gateway the renderer knows; default 10.0.0.1, or 127.0.0.254 when
	// the first device is on the loopback network (a device this test client, at 127.0.0.1, is).
	Gateway netip.Addr
	// Wrap, when set, wraps the handler (a test that records requests).
	Wrap func(http.Handler) http.Handler
	// CertLifetime is both certificates' lifetime, one hour by default; RenewAfter their
	// renewal point, half the lifetime by default (a renewal test with the real clock sets a few
	// seconds).
	CertLifetime, RenewAfter time.Duration
	// TalosSecrets is the Talos secrets bundle the renderer signs with; default a new one
	// (seconds of RSA key generation: a test that starts several fleetds of one fleet passes the
	// first one's Fleetd.TalosSecrets, as instances of one fleet share theirs).
	TalosSecrets []byte
	// Now, when set, is the clock of the service, the CAs' issuer and every verifier (a test of
	// renewal moves it); default time.Now.
	Now func() time.Time
	// Receipts records what the receipt route verified; nil: the service, as fleetd serve wires
	// it (a test's fake of the domain's part replaces it). NoReceipts wires none: the route
	// answers 503 not_configured. The receipt tokens are sealed under TokenKey, with
	// TokenLifetime as their margin.
	Receipts   handlers.WipeReceipts
	NoReceipts bool
	// HandlerLog receives the handlers' log lines (their decision lines); default none.
	HandlerLog zerolog.Logger
	// SPIRE is the SPIRE server a wipe's or retirement's claim bans the device's agents at;
	// default none (interop/spire passes fleetd's adapter to a real server).
	SPIRE fleet.SPIRE
}

type clockFunc func() time.Time

func (c clockFunc) Now() time.Time { return c() }

// Fleetd is the running fleetd under test.
type Fleetd struct {
	Inv       *fleettest.NetBox
	Installer *fleettest.Installer
	ChangeLog *fleettest.ChangeLog // NetBox's change log, empty unless a test writes it
	Service   *fleet.Service
	Attest    fleet.Attestation
	LDevIDCA  *pki.CA
	LAKCA     *pki.CA
	Registry  *prometheus.Registry // the service's metrics, served at /metrics
	// DeviceRegistry holds the service's per-device series, served at /metrics/devices with the
	// metrics token "metrics".
	DeviceRegistry *prometheus.Registry
	Handler        http.Handler
	URL            string
	// TalosSecrets is the secrets bundle its renderer signs with (Config.TalosSecrets or new).
	TalosSecrets []byte
}

// New starts a fleetd under test; it stops with the test.
func New(tb testing.TB, cfg Config) *Fleetd {
	tb.Helper()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	if len(cfg.Catalog.Names()) == 0 {
		cfg.Catalog = fleettest.Catalog()
	}
	if cfg.EKPolicy == "" {
		cfg.EKPolicy = attest.EKPolicyHash
	}
	if cfg.TokenLifetime == 0 {
		cfg.TokenLifetime = time.Minute
	}
	if !cfg.Gateway.IsValid() {
		cfg.Gateway = netip.MustParseAddr("10.0.0.1")
		if len(cfg.Devices) > 0 && cfg.Devices[0].Address.Addr().IsLoopback() {
			cfg.Gateway = netip.MustParseAddr("127.0.0.254")
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CertLifetime == 0 {
		cfg.CertLifetime = time.Hour
	}
	clock := clockFunc(cfg.Now)
	f := &Fleetd{Inv: fleettest.NewNetBox(cfg.Devices...), Installer: fleettest.NewInstaller(), ChangeLog: &fleettest.ChangeLog{}, Registry: prometheus.NewRegistry(),
		DeviceRegistry: prometheus.NewRegistry()}
	var err error
	f.LDevIDCA, _, err = pki.NewCA(pki.NewCAConfig{Name: "fleetd LDevID", Lifetime: 24 * time.Hour, Rand: rand.Reader, Now: cfg.Now})
	must(err)
	f.LAKCA, _, err = pki.NewCA(pki.NewCAConfig{Name: "fleetd LAK", Lifetime: 24 * time.Hour, Rand: rand.Reader, Now: cfg.Now})
	must(err)
	f.Attest.Issuer, err = pki.NewIssuer(pki.IssuerConfig{LDevID: f.LDevIDCA, LAK: f.LAKCA, LDevIDLifetime: cfg.CertLifetime, LAKLifetime: cfg.CertLifetime,
		LDevIDRenewAfter: cfg.RenewAfter, LAKRenewAfter: cfg.RenewAfter, Rand: rand.Reader, Now: cfg.Now})
	must(err)
	f.Attest.BootPolicy = cfg.BootPolicy
	if f.Attest.BootPolicy == nil {
		f.Attest.BootPolicy = BootPolicy(tb, "", eventlogs.RHEL8SecureBoot, eventlogs.COS85SecureBoot,
			eventlogs.Ubuntu2104NoSecureBoot, eventlogs.Ubuntu2104NoDBX)
	}
	f.Attest.EK, err = attest.NewEKVerifier(attest.EKVerifierConfig{Policy: cfg.EKPolicy, BundlePEM: cfg.EKBundle, Now: cfg.Now})
	must(err)
	key := cfg.TokenKey
	if key == nil {
		key = make([]byte, attest.TokenKeySize)
	}
	f.Attest.Tokens, err = attest.NewTokenSealer(attest.TokenConfig{Key: key, Lifetime: cfg.TokenLifetime, Rand: rand.Reader, Now: cfg.Now})
	must(err)
	f.Attest.LAK, err = attest.NewLAKVerifier(attest.LAKVerifierConfig{Issuer: f.LAKCA.Cert, Above: f.LAKCA.Above, Now: cfg.Now})
	must(err)
	f.Attest.BootNonces, err = attest.NewBootNonceSealer(attest.BootNonceConfig{TokenKey: key, Lifetime: cfg.TokenLifetime, Rand: rand.Reader, Now: cfg.Now})
	must(err)
	f.Attest.Receipts, err = attest.NewReceiptSealer(attest.ReceiptConfig{TokenKey: key, Margin: cfg.TokenLifetime, Rand: rand.Reader, Now: cfg.Now})
	must(err)
	f.TalosSecrets = cfg.TalosSecrets
	if f.TalosSecrets == nil {
		f.TalosSecrets, err = render.GenerateTalosSecrets(clock)
		must(err)
	}
	renderer, err := render.New(render.Config{TalosSecrets: f.TalosSecrets, ClusterName: "folly", ClusterEndpoint: "https://10.0.0.10:6443",
		DNS: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Gateway: cfg.Gateway, Clock: clock, Random: rand.Reader})
	must(err)
	f.Inv.Clock = clock
	f.Service, err = fleet.NewService(fleet.Config{FleetdURL: "http://spore", ServiceUser: fleettest.ServiceUser}, fleet.Deps{Seal: fleettest.SealKeys(), NetBox: f.Inv, ChangeLog: f.ChangeLog, Installer: f.Installer,
		Catalog: cfg.Catalog, Renderer: renderer, Attest: f.Attest, Cluster: cfg.Cluster,
		Clock: clock, Random: rand.Reader, Logger: zerolog.Nop(), Registry: f.Registry, DeviceRegistry: f.DeviceRegistry, SPIRE: cfg.SPIRE})
	must(err)
	intake, err := webhook.New(webhook.Config{Secret: []byte(WebhookSecret), ServiceUser: fleettest.ServiceUser},
		webhook.Deps{Reconciler: f.Service.Requests, Registry: f.Registry, Logger: zerolog.Nop()})
	must(err)
	ctx, stop := context.WithCancel(context.Background())
	tb.Cleanup(stop)
	go func() { _ = intake.Run(ctx) }() // the webhook workers, as fleetd serve runs them
	receipts := cfg.Receipts
	switch {
	case cfg.NoReceipts:
		receipts = nil
	case receipts == nil:
		receipts = f.Service.Requests
	}
	h, err := handlers.New(handlers.Deps{Enrollment: f.Service.Enrollment, Delivery: f.Service.Delivery, BootChecks: f.Service.BootChecks, Requests: f.Service.Requests,
		Review: f.Service.Review, Views: f.Service.Views, Webhooks: intake, Gatherer: f.Registry, DeviceGatherer: f.DeviceRegistry,
		MetricsToken: []byte("metrics"), OperatorToken: []byte("op"), Logger: cfg.HandlerLog,
		ReceiptTokens: f.Attest.Receipts, Receipts: receipts})
	must(err)
	f.Handler = h
	if cfg.Wrap != nil {
		f.Handler = cfg.Wrap(h)
	}
	srv := httptest.NewServer(f.Handler)
	tb.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// BootPolicy is a boot policy that allows the boots of the given event logs, learned as `fleetd
// policy learn` learns them, for the fleet (class "") or for one class.
func BootPolicy(tb testing.TB, class string, logs ...[]byte) *attest.BootPolicy {
	tb.Helper()
	var f attest.BootPolicyFile
	for i, l := range logs {
		c, err := attest.LearnBoot(l)
		if err != nil {
			tb.Fatal(err)
		}
		f.Learn(class, fmt.Sprintf("recorded boot %d", i+1), c)
	}
	b, err := json.Marshal(f)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := attest.ParseBootPolicy(b)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
