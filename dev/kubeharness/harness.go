// Package kubeharness runs a real Kubernetes API server with the Tinkerbell CRDs inside the
// calling process: an embedded etcd and k8s.io/apiextensions-apiserver, on loopback (docs/design.md §8,
// "a real Kubernetes API server with the Tinkerbell CRDs").
//
// It is for tests and for the development stack (bin/fleetsim) only; the production fleetd
// binary must never link it. Trust assumptions: the server listens on 127.0.0.1 only and
// authorizes every request, authenticated or anonymous (there is no RBAC). It serves
// CustomResourceDefinitions and custom resources but no core API (no Namespaces, Secrets,
// Events or Leases) and runs no controllers: nothing moves a Workflow's status unless a test or
// dev/tinkerbell (Tinkerbell's own controller) does.
package kubeharness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/client-go/rest"
)

// Options configure Start.
type Options struct {
	// Dir holds etcd's data, the serving certificate and the bearer token. A server restarted on
	// the same Dir keeps its objects, certificate and token, so clients built for the previous
	// run keep working. Empty means a new temporary directory, removed by Stop.
	Dir string
	// Port is the API server's TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// CRDDir is the directory of CRD manifests to install. Empty means tink's
	// config/crd/bases, located with `go list -m -f {{.Dir}} github.com/tinkerbell/tink` (this
	// needs the go command and the fleetd module at run time).
	CRDDir string
	// MoreCRDDirs are further directories of CRD manifests installed with those (Rufio's, whose
	// Jobs Tinkerbell's controller manages for Workflows with a bootMode).
	MoreCRDDirs []string
}

// Server is a running API server. Its methods are safe for concurrent use.
type Server struct {
	dir     string
	tempDir bool
	url     string
	caPEM   []byte
	token   string

	etcd      *embed.Etcd
	etcdURL   string
	cancel    context.CancelFunc
	runDone   chan error
	stopOnce  sync.Once
	stopError error
}

// startTimeout bounds how long the server may take to become ready.
const startTimeout = 60 * time.Second

// Start starts etcd and the API server, installs the CRDs and returns once the server answers
// /readyz and every CRD is Established and listed in discovery. ctx bounds start-up only; the
// server runs until Stop.
func Start(ctx context.Context, o Options) (*Server, error) {
	s := &Server{dir: o.Dir}
	if s.dir == "" {
		d, err := os.MkdirTemp("", "kubeharness-")
		if err != nil {
			return nil, fmt.Errorf("create temporary data dir: %w", err)
		}
		s.dir, s.tempDir = d, true
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", s.dir, err)
	}
	crdDir, err := locateCRDs(ctx, o.CRDDir)
	if err != nil {
		s.removeTemp()
		return nil, err
	}
	if err := s.loadCredentials(); err != nil {
		s.removeTemp()
		return nil, err
	}
	if err := s.startEtcd(); err != nil {
		s.removeTemp()
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port)))
	if err != nil {
		s.etcd.Close()
		s.removeTemp()
		return nil, fmt.Errorf("listen on 127.0.0.1:%d for the API server: %w", o.Port, err)
	}
	s.url = "https://" + ln.Addr().String()
	if err := s.startAPIServer(ln); err != nil {
		ln.Close()
		s.etcd.Close()
		s.removeTemp()
		return nil, err
	}
	// From here the API server runs; it must reach /readyz before it may be stopped
	// (stopping it earlier makes a post-start hook call os.Exit), so waitReady does not give up
	// when ctx ends.
	if err := s.waitReady(ctx); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	for _, dir := range append([]string{crdDir}, o.MoreCRDDirs...) {
		if err := installCRDs(ctx, s.RESTConfig(), dir); err != nil {
			return nil, errors.Join(err, s.Stop())
		}
	}
	return s, nil
}

// URL is the API server's base URL, e.g. https://127.0.0.1:43127.
func (s *Server) URL() string { return s.url }

// Dir is the data directory (Options.Dir, or the temporary one).
func (s *Server) Dir() string { return s.dir }

// RESTConfig returns a client configuration with full access: the server URL, the serving
// certificate as CA and the bearer token of the privileged loopback user (system:masters).
// Each call returns a new copy.
func (s *Server) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            s.url,
		BearerToken:     s.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), s.caPEM...)},
		QPS:             200,
		Burst:           400,
	}
}

// Stop shuts the API server down gracefully (about one second) and then closes etcd. A
// temporary data directory is removed. Stop is idempotent; later calls return the first result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.cancel()
		if err := <-s.runDone; err != nil && !errors.Is(err, context.Canceled) {
			s.stopError = fmt.Errorf("stop API server: %w", err)
		}
		s.etcd.Close()
		s.removeTemp()
	})
	return s.stopError
}

func (s *Server) removeTemp() {
	if s.tempDir {
		os.RemoveAll(s.dir)
	}
}

// startEtcd starts the server's etcd in Dir/etcd (StartEtcd).
func (s *Server) startEtcd() error {
	e, url, err := StartEtcd(filepath.Join(s.dir, "etcd"))
	if err != nil {
		return err
	}
	s.etcd, s.etcdURL = e, url
	return nil
}

// StartEtcd starts a single-member embedded etcd in dir, on loopback, with fast elections and no
// fsync (test and dev data; a crash may lose the last writes), and returns it with its client
// URL once it is ready. Its two ports are picked by listen-and-close, which leaves a small race
// with other processes. dev/kubecluster's kube-apiserver stores in one too. The caller closes it.
func StartEtcd(dir string) (*embed.Etcd, string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, "", err
	}
	cfg := embed.NewConfig()
	cfg.Name = "kubeharness"
	cfg.Dir = dir
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("start embedded etcd in %s: %w", cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("start embedded etcd in %s: %w", cfg.Dir, err)
	case <-time.After(startTimeout):
		e.Close()
		return nil, "", fmt.Errorf("start embedded etcd in %s: not ready after %s", cfg.Dir, startTimeout)
	}
	return e, client.String(), nil
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port for etcd: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
