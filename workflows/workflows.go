// Package workflows is fleetd's Tinkerbell adapter: it implements fleet.Installer on Tinkerbell's
// Kubernetes API (tinkerbell.org/v1alpha1 Hardware, Template, Workflow; docs/design.md §3) through
// client-go's dynamic client with the tink v0.12.2 types (kube.go says why not controller-runtime's).
//
// Trust: the Kubernetes API is trusted to store what fleetd writes; Templates come from the
// infrastructure repo and are checked before fleetd creates a Workflow from them (CheckTemplate);
// Workflow status is written by Tinkerbell and read as a report, never as proof of attestation.
package workflows

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/folly-infra/fleetd/fleet"
)

// Labels fleetd puts on the Hardware and Workflows it creates. The Watch selects Workflows by
// LabelDeviceID.
const (
	LabelDeviceID = "fleetd.folly-infra/device-id" // NetBox device id, decimal
	LabelRequest  = "fleetd.folly-infra/request"   // request id, e.g. provision-k3f9x2mq
	LabelAction   = "fleetd.folly-infra/action"    // provision, attest, wipe or retire
)

// hardwareMap keys every fleetd Workflow carries; Templates read them as {{.device_1}} etc.
const (
	MapMAC        = "device_1"    // primary MAC, lowercase and colon-separated as Smee formats worker_id
	MapDiskSerial = "disk_serial" // declared serial of the only disk that may be erased
	MapFleetdURL  = "fleetd_url"  // base URL the agent and actions reach fleetd at
	MapDeviceName = "device_name" // NetBox device name (also the Hardware name)
	MapDeviceID   = "device_id"   // NetBox device id
	MapRequest    = "request"     // request id
	MapAction     = "action"      // the request's action
	MapImageURL   = "image_url"   // the class's OS image URL (provision Templates write it)
	// MapGlobalTimeout is the class's workflow_timeout in seconds (fleet.DefaultWorkflowTimeout
	// when the class sets none), for the Template's global_timeout.
	MapGlobalTimeout = "global_timeout"
)

// Config configures New.
type Config struct {
	RESTConfig *rest.Config // the API server and credentials (kubernetes.*); QPS 0 means 500 with burst 1,000
	Namespace  string       // where Hardware, Templates and Workflows live (Tinkerbell's namespace)
	// Version is the Tinkerbell the site runs (kubernetes.tinkerbell_version); "" means
	// DefaultVersion. It decides how Templates are rendered and checked.
	Version  Version
	Logger   zerolog.Logger
	Registry prometheus.Registerer // metrics are registered here; nil means none are exported
	Clock    fleet.Clock           // nil means the wall clock
}

// Installer implements fleet.Installer on Tinkerbell's Kubernetes API. It is safe for
// concurrent use.
type Installer struct {
	k       kube
	ns      string
	version Version
	log     zerolog.Logger
	clock   fleet.Clock
	metrics metrics
}

var _ fleet.Installer = (*Installer)(nil)

// Scheme returns a scheme with tink v0.12.2's types (Hardware, Template, Workflow and lists).
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := tinkv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("register tink types: %w", err)
	}
	return s, nil
}

// New builds an Installer. It does not contact the API server (see Ping).
func New(cfg Config) (*Installer, error) {
	if cfg.Namespace == "" {
		return nil, errors.New("workflows: Namespace is empty: name Tinkerbell's namespace")
	}
	if cfg.RESTConfig == nil {
		return nil, errors.New("workflows: RESTConfig is nil: name the Kubernetes API server")
	}
	rc := rest.CopyConfig(cfg.RESTConfig)
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 500, 1000 // kubernetes.qps and kubernetes.burst defaults (package config)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("workflows: build Kubernetes client for %s: %w", rc.Host, err)
	}
	clock := cfg.Clock
	if clock == nil {
		clock = fleet.SystemClock{}
	}
	version, err := ParseVersion(string(cfg.Version))
	if err != nil {
		return nil, fmt.Errorf("workflows: %w", err)
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	return &Installer{k: kube{dyn: dyn, ns: cfg.Namespace}, ns: cfg.Namespace, version: version, log: cfg.Logger, clock: clock, metrics: m}, nil
}

// Ping checks that the API server answers and serves Workflows (readiness, docs/design.md §6): a List of
// at most one Workflow in the namespace.
func (in *Installer) Ping(ctx context.Context) error {
	_, err := in.k.list(ctx, workflowResource, metav1.ListOptions{Limit: 1})
	if err = in.observe("list_workflows", err); err != nil {
		return fmt.Errorf("list Workflows in namespace %s: %w", in.ns, err)
	}
	return nil
}

type metrics struct {
	requests *prometheus.CounterVec
	created  prometheus.Counter
	pruned   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (metrics, error) {
	m := metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_kubernetes_requests_total",
			Help: "Requests fleetd made to the Kubernetes API, by operation and outcome.",
		}, []string{"op", "outcome"}),
		created: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleetd_workflows_created_total",
			Help: "Tinkerbell Workflows fleetd created.",
		}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleetd_workflows_pruned_total",
			Help: "Ended Tinkerbell Workflows fleetd deleted an hour after they last changed.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.created, m.pruned} {
			if err := reg.Register(c); err != nil {
				return metrics{}, fmt.Errorf("workflows: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

// observe counts one API request by its outcome and returns err unchanged.
func (in *Installer) observe(op string, err error) error {
	in.metrics.requests.WithLabelValues(op, outcome(err)).Inc()
	return err
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsNotFound(err):
		return "not_found"
	case apierrors.IsAlreadyExists(err):
		return "already_exists"
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsInvalid(err):
		return "invalid"
	}
	return "error"
}
