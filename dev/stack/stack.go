// Package stack is fleetd's development stack (docs/design.md §8): a NetBox emulator loaded with
// netbox-webhooks.yaml, a real Kubernetes API server with the Tinkerbell CRDs and the example
// Templates, simulated machines with software TPMs, and `fleetd serve` itself as a supervised
// child process, seeded with the example inventory. bin/fleetsim runs it in the foreground
// (`fleetsim up`); tests start it in TestMain and act on it through NetBox's REST API and
// fleetd's HTTP API, as a person with curl would.
//
// Trust assumptions: everything listens on loopback only and every secret is generated fresh on
// each start into the state directory (mode 0600). The stack is development code; the
// production binary links none of it.
package stack

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/kubecluster"
	"github.com/folly-infra/fleetd/dev/kubeharness"
	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
)

// Options configure Start. Dir and FleetdBinary are required.
type Options struct {
	// Dir is the state directory. It is emptied on start: it must be missing, empty, or the
	// state of an earlier stack (it holds the marker file .fleetsim); anything else is refused.
	Dir string
	// Root is the fleetd checkout, where netbox-webhooks.yaml and examples/classes.json are
	// read from. Empty means the module root above the working directory.
	Root string
	// FleetdBinary is the `fleetd` executable run as `fleetd serve`.
	FleetdBinary string
	// ExtraDevices adds that many generated, validly declared talos-worker devices, each with a
	// simulated machine (load and storm tests).
	ExtraDevices int
	// MoreDevices are added after those (tests that need devices of their own).
	MoreDevices []SeedDevice
	// Namespace is Tinkerbell's namespace; default tink-system.
	Namespace string
	// Tinkerbell is the Tinkerbell the stack runs (its own programs, scripts/tools.sh builds
	// them); default the one FLEETD_TINKERBELL names, or v0.25.0 (tinkerbell.VersionFromEnv).
	Tinkerbell tinkerbell.Version
	// ReconcileInterval is fleetd's reconcile.interval; default 30 s (fleetd's minimum is 5 s).
	ReconcileInterval time.Duration
	// DeliveryTimeout bounds one webhook delivery of the emulator; default 2 s.
	DeliveryTimeout time.Duration
	// NetBoxRetries is fleetd's netbox.retries; default 2, so that a webhook that finds NetBox
	// failing is answered 503 within the emulator's delivery timeout.
	NetBoxRetries int
	// NetBoxTimeout is fleetd's netbox.timeout, the bound of one NetBox request; default 5 s.
	NetBoxTimeout time.Duration
	// ApplySchema, when set, creates netbox-webhooks.yaml's custom fields, choice sets, webhooks
	// and event rules through the emulator's API (as the OpenTofu root does) instead of the
	// emulator's LoadSchema. It runs before the inventory is seeded, which needs the fields.
	ApplySchema func(ctx context.Context, t SchemaTarget) error
	// NetBoxLatency is added to every request the NetBox emulator answers (netboxemu
	// Config.Latency), so that fleetd meets NetBox at a real NetBox's pace; default 0.
	NetBoxLatency time.Duration
	// NetBoxLatencyObjects scales NetBoxLatency with a list's page (netboxemu
	// Config.LatencyObjects): a page of n objects takes NetBoxLatency × n/NetBoxLatencyObjects
	// when that is more; 0 (the default) does not scale it.
	NetBoxLatencyObjects int
	// CertLifetime is fleetd's pki.ldevid.lifetime and pki.lak.lifetime, each renewed from half
	// of it by boot checks (renewal tests); default 2160h (90 days), at least a minute.
	CertLifetime time.Duration
	// LDevIDLifetime is fleetd's pki.ldevid.lifetime when set, CertLifetime otherwise (a test
	// that needs an LDevID close to its end without waiting: ReconfigureFleetd).
	LDevIDLifetime time.Duration
	// InventoryBootCheckWindow is fleetd's inventory.boot_check_window; unset leaves fleetd's
	// default (3 h). The test stack's is short, so that boot_checks_stopped is seen in a test.
	InventoryBootCheckWindow time.Duration
	// FleetdInstances is how many `fleetd serve` processes run, each with listeners, a pid file
	// and a log of its own, against the same NetBox, Kubernetes API and fleetd.yaml; with more
	// than one, a round-robin TCP front that keeps the client's source address answers on
	// fleetd's URLs (front.go, docs/operate.md "Several instances"). Default 1, without a front;
	// at most maxFleetdInstances.
	FleetdInstances int
	// WorkloadCluster runs a workload cluster for the Talos machines to join (workload.go): a
	// real kube-apiserver and kube-controller-manager (dev/kubecluster) asking fleetd's
	// authorization webhook, fleetd's cluster: section set for it, and the Talos classes joining
	// Kubernetes, so that a Talos machine's first boot runs its kubelet's join (Boot) and its
	// device is active only once its Node is Ready. Off (the default), the Talos classes go
	// active at delivery and nothing more starts. Measured on a 2-core machine with the two
	// programs already built in the tools cache, it costs the start about 2 s (3.8 s → 5.6 s;
	// the cluster starts beside the stack's other API server) and about 350 MB of memory
	// (kube-apiserver 270 MB, kube-controller-manager 70 MB, and the cluster's etcd in this
	// process). It runs with one fleetd instance only.
	WorkloadCluster bool
	// JoinDeadline is fleetd's cluster.join_deadline with WorkloadCluster (at least a minute,
	// fleetd's minimum); unset leaves fleetd's default (30 minutes).
	JoinDeadline time.Duration
	// DebugListen gives every fleetd instance a debug listener (serve --debug-listen) on a free
	// loopback port: Go's profiles, at FleetdInstance.DebugURL (the load test's heap profiles).
	DebugListen bool
	// LogLevel is fleetd's log.level; default info.
	LogLevel string
	// Logger is the stack's own log (deliveries, fleetd restarts).
	Logger zerolog.Logger
	// Rand is the randomness for secrets, keys and the emulator's tokens and request ids; it must
	// be safe for concurrent use. Default crypto/rand.
	Rand io.Reader
	// Clock stamps certificates and the Talos secrets; default the wall clock.
	Clock fleet.Clock
}

func (o *Options) defaults() error {
	if o.Dir == "" || o.FleetdBinary == "" {
		return errors.New("start stack: Options.Dir and Options.FleetdBinary are required")
	}
	var err error
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return fmt.Errorf("start stack: resolve state dir: %w", err)
	}
	if o.FleetdBinary, err = filepath.Abs(o.FleetdBinary); err != nil {
		return fmt.Errorf("start stack: resolve fleetd binary: %w", err)
	}
	if o.Root == "" {
		if o.Root, err = FindRoot("."); err != nil {
			return fmt.Errorf("start stack: %w", err)
		}
	}
	if o.Namespace == "" {
		o.Namespace = "tink-system"
	}
	if o.Tinkerbell == "" {
		if o.Tinkerbell, err = tinkerbell.VersionFromEnv(); err != nil {
			return fmt.Errorf("start stack: %w", err)
		}
	}
	if _, err := tinkerbell.ParseVersion(string(o.Tinkerbell)); err != nil {
		return fmt.Errorf("start stack: Options.Tinkerbell: %w", err)
	}
	if o.CertLifetime == 0 {
		o.CertLifetime = 2160 * time.Hour
	}
	if o.ReconcileInterval == 0 {
		o.ReconcileInterval = 30 * time.Second
	}
	if o.DeliveryTimeout == 0 {
		o.DeliveryTimeout = 2 * time.Second
	}
	if o.NetBoxRetries == 0 {
		o.NetBoxRetries = 2
	}
	if o.NetBoxTimeout == 0 {
		o.NetBoxTimeout = 5 * time.Second
	}
	if o.FleetdInstances == 0 {
		o.FleetdInstances = 1
	}
	if o.FleetdInstances < 1 || o.FleetdInstances > maxFleetdInstances {
		return fmt.Errorf("start stack: Options.FleetdInstances is %d: run 1 to %d fleetd instances", o.FleetdInstances, maxFleetdInstances)
	}
	if o.WorkloadCluster && o.FleetdInstances != 1 {
		return fmt.Errorf("start stack: Options.WorkloadCluster runs with one fleetd instance, not %d: the API server asks one webhook URL", o.FleetdInstances)
	}
	if o.JoinDeadline != 0 && !o.WorkloadCluster {
		return errors.New("start stack: Options.JoinDeadline is set without Options.WorkloadCluster: no class joins a cluster")
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.Clock == nil {
		o.Clock = fleet.SystemClock{}
	}
	return nil
}

// Stack is a running development stack. Its methods are safe for concurrent use.
type Stack struct {
	opts     Options
	info     Info
	conf     fleetdConfig // what fleetd.yaml was written from (ReconfigureFleetd)
	confMu   sync.Mutex   // guards conf
	paths    paths
	emu      *netboxemu.Emulator
	sealedMu sync.Mutex
	sealed   int // the devices AddSealedDevices and AddDeclaredDevices added (their addresses, MACs and serials follow on)
	kc       client.WithWatch
	supMu    sync.Mutex             // guards sups' entries (StopFleetdInstance, StartFleetdInstance)
	sups     []*supervisor          // one per fleetd instance, in order
	front    []*front               // the https and plain fronts with several instances, else none
	tb       *tinkerbell.Tinkerbell // its controller and server, the workers' API
	tink     TinkerbellInfo

	lock *os.File // the state directory's marker, locked while the stack runs

	workload     *kubecluster.Cluster // Options.WorkloadCluster's, else nil
	workloadInfo *WorkloadClusterInfo

	kubeMu   sync.Mutex
	kube     *kubeharness.Server // nil while stopped (StopKube)
	kubePort int
}

// Start builds the stack, in order: the state directory and every secret; the NetBox emulator
// with the schema; the Kubernetes API with the Templates, and the machines' TPMs (in parallel);
// the inventory; fleetd, started and supervised until it is ready; then stack.json. ctx bounds
// the start only. On error everything started is stopped again.
func Start(ctx context.Context, o Options) (_ *Stack, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	s := &Stack{opts: o, paths: newPaths(o.Dir)}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.lock, err = s.paths.prepare(); err != nil {
		return nil, err
	}
	gen, err := generateSecrets(s.paths, o.Rand, o.Clock)
	if err != nil {
		return nil, err
	}
	fleetdURL, err := freeLoopbackURL("https")
	if err != nil {
		return nil, err
	}
	httpURL, err := freeLoopbackURL("http")
	if err != nil {
		return nil, err
	}
	if err := s.startNetBox(ctx, httpURL, gen); err != nil {
		return nil, err
	}
	var webhookURL string // fleetd's cluster.authorization listener, with Options.WorkloadCluster
	if o.WorkloadCluster {
		if webhookURL, err = freeLoopbackURL("https"); err != nil {
			return nil, err
		}
		webhookURL += "/v1/cluster/authorize"
	}
	devices := SeedDevices(o.ExtraDevices, o.MoreDevices...)
	seeded, machines, err := s.startKubeAndMachines(ctx, devices, webhookURL)
	if err != nil {
		return nil, err
	}
	s.conf = fleetdConfig{opts: o, fleetdURL: fleetdURL, httpURL: httpURL, netboxURL: s.emu.URL(),
		gatewayAddr: Gateway, talosEndpoint: talosEndpoint(devices)}
	if o.WorkloadCluster {
		if s.conf.workload, err = s.workloadConf(webhookURL); err != nil {
			return nil, err
		}
	}
	if err := writeFleetdConfig(s.paths, s.conf); err != nil {
		return nil, err
	}
	instances, err := s.instances(fleetdURL, httpURL)
	if err != nil {
		return nil, err
	}
	talosMeta, err := tinkerbell.Tool(o.Root, "talos-meta")
	if err != nil {
		return nil, fmt.Errorf("start stack: Talos's META reader, which a Talos machine's first boot reads its META with: %w", err)
	}
	s.info = Info{Dir: o.Dir,
		NetBox: NetBoxInfo{URL: s.emu.URL(), Token: gen.adminToken, ServiceTokenFile: s.paths.netboxToken},
		Fleetd: FleetdInfo{URL: fleetdURL, HTTPURL: httpURL, OperatorToken: gen.operatorToken, MetricsToken: gen.metricsToken, Config: s.paths.fleetdConfig,
			PIDFile: s.paths.fleetdPID, Log: s.paths.fleetdLog, Binary: o.FleetdBinary, CertLifetime: o.CertLifetime,
			Instances: instances},
		WebhookSecret: gen.webhookSecret, Kubeconfig: s.paths.kubeconfig, Namespace: o.Namespace,
		Kubernetes: KubernetesInfo{URL: s.kubeURL(), Dir: s.paths.kube},
		Tinkerbell: s.tink,
		CA:         CAInfo{LDevID: s.paths.ldevidCert, LAK: s.paths.lakCert, EK: s.paths.ekBundle, Fleetd: s.paths.fleetdCA},
		Machines:   machines, Devices: seeded, TalosMeta: talosMeta, WorkloadCluster: s.workloadInfo}
	if err := s.startFleetd(fleetdURL, httpURL); err != nil {
		return nil, err
	}
	if err := waitFleetdReady(ctx, s.info); err != nil {
		return nil, err
	}
	if err := WriteInfo(s.info); err != nil {
		return nil, err
	}
	return s, nil
}

// startKubeAndMachines starts the API server (and, with a webhook URL, the workload cluster)
// while the machines' TPMs are manufactured, then installs the Templates and seeds the inventory
// with the machines' EK hashes.
func (s *Stack) startKubeAndMachines(ctx context.Context, devices []SeedDevice, webhookURL string) ([]DeviceInfo, map[string]Machine, error) {
	var tpms map[string]machineTPM
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.startKube(gctx, 0) })
	if webhookURL != "" {
		g.Go(func() error { return s.startWorkloadCluster(gctx, webhookURL) })
	}
	// A failing API server start cancels the TPMs still being made (swtpm.Manufacture ends
	// swtpm_setup with every process it started).
	g.Go(func() (err error) { tpms, err = manufacture(gctx, s.paths, devices, s.opts.Rand); return err })
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	if err := s.installTemplates(ctx); err != nil {
		return nil, nil, err
	}
	if err := s.startController(ctx); err != nil {
		return nil, nil, err
	}
	return seed(s.emu, devices, tpms)
}

// startNetBox starts the emulator on a free loopback port, creates the two users' tokens, and
// loads netbox-webhooks.yaml with payload URLs under fleetdURL (fleetd's plain HTTP listener)
// and the webhook secret, or has Options.ApplySchema create it through the API.
func (s *Stack) startNetBox(ctx context.Context, fleetdURL string, gen *generated) error {
	schemaFile, err := loadSchema(s.opts.Root, s.paths)
	if err != nil {
		return err
	}
	s.emu, err = netboxemu.Start(netboxemu.Config{Logger: s.opts.Logger, Rand: s.opts.Rand,
		DeliveryTimeout: s.opts.DeliveryTimeout, Latency: s.opts.NetBoxLatency, LatencyObjects: s.opts.NetBoxLatencyObjects})
	if err != nil {
		return fmt.Errorf("start NetBox emulator: %w", err)
	}
	if err := gen.addTokens(s.emu, s.paths); err != nil {
		return err
	}
	if s.opts.ApplySchema != nil {
		err := s.opts.ApplySchema(ctx, SchemaTarget{NetBoxURL: s.emu.URL(), Token: gen.adminToken,
			FleetdURL: fleetdURL, WebhookSecret: gen.webhookSecret, File: filepath.Join(s.opts.Root, "netbox-webhooks.yaml")})
		if err != nil {
			return fmt.Errorf("apply netbox-webhooks.yaml to the emulator: %w", err)
		}
		return nil
	}
	if err := s.emu.LoadSchema(schemaFile, fleetdURL, gen.webhookSecret); err != nil {
		return fmt.Errorf("load netbox-webhooks.yaml into the emulator: %w", err)
	}
	return nil
}

// SchemaTarget is what Options.ApplySchema is given to create netbox-webhooks.yaml's objects.
type SchemaTarget struct {
	NetBoxURL     string // the emulator's base URL
	Token         string // the owner's API token (may write the extras objects)
	FleetdURL     string // fleetd's plain HTTP listener: each webhook's payload_url is this plus its path
	WebhookSecret string // the secret fleetd verifies X-Hook-Signature with
	File          string // the checkout's netbox-webhooks.yaml
}

// Info is what stack.json says.
func (s *Stack) Info() Info { return s.info }

// NetBox is the emulator, for what a test inspects besides the REST API (deliveries, faults).
func (s *Stack) NetBox() *netboxemu.Emulator { return s.emu }

// Owner is a NetBox REST client with the owner's token.
func (s *Stack) Owner() *Owner { return NewOwner(s.info.NetBox.URL, s.info.NetBox.Token) }

// Kube is a client of the Kubernetes API with full access; it keeps working across
// StopKube/StartKube (same port, certificate and token).
func (s *Stack) Kube() client.WithWatch { return s.kc }

// DeviceID returns the NetBox id of a seeded device, or 0.
func (s *Stack) DeviceID(name string) int64 {
	for _, d := range s.info.Devices {
		if d.Name == name {
			return d.ID
		}
	}
	return 0
}

// FleetdPID is the pid of the running fleetd (the first instance), 0 while it is restarting.
func (s *Stack) FleetdPID() int { return s.FleetdInstancePID(1) }

// Close stops the front, fleetd, Tinkerbell, the API server and the emulator, in that order. The state directory stays
// for inspection.
func (s *Stack) Close() error {
	var errs []error
	for _, f := range s.front {
		errs = append(errs, f.close())
	}
	s.supMu.Lock()
	sups := slices.Clone(s.sups)
	s.supMu.Unlock()
	for _, sup := range sups {
		if sup != nil {
			errs = append(errs, sup.stop())
		}
	}
	if s.tb != nil {
		errs = append(errs, s.tb.Stop())
	}
	errs = append(errs, s.StopKube(), s.stopWorkloadCluster())
	if s.emu != nil {
		errs = append(errs, s.emu.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close())
	}
	return errors.Join(errs...)
}
