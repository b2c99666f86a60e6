package kubeharness

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	noopoteltrace "go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apiextensions-apiserver/pkg/cmd/server/options"
	generatedopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	"k8s.io/apimachinery/pkg/util/wait"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/openapi"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// startAPIServer builds the apiextensions-apiserver configuration by hand and runs it on ln.
// Each setting below answers one way the stock configuration fails without a kube-apiserver:
//   - CoreAPI nil and a stub ServiceResolver: there is no kube-apiserver to inform from (with a
//     fake kubeconfig /readyz never passes);
//   - authentication and authorization need no remote kubeconfig (by default both delegate to a
//     kube-apiserver), and every group is allowed;
//   - admission off, priority-and-fairness off: both need core informers;
//   - discovery on (Complete turns it off), and an empty /api, so that kubectl works;
//   - the listener is handed in (no port race), and the serving certificate is the ECDSA one in
//     Dir (no RSA key generation at start).
func (s *Server) startAPIServer(ln net.Listener) error {
	o := options.NewCustomResourceDefinitionsServerOptions(io.Discard, io.Discard)
	ro := o.RecommendedOptions
	ro.CoreAPI = nil
	ro.Admission = nil
	ro.Features.EnablePriorityAndFairness = false
	ro.Authentication.RemoteKubeConfigFileOptional = true
	ro.Authentication.SkipInClusterLookup = true
	ro.Authorization.RemoteKubeConfigFileOptional = true
	ro.Authorization.AlwaysAllowGroups = append(ro.Authorization.AlwaysAllowGroups,
		"system:authenticated", "system:unauthenticated")
	ro.Etcd.StorageConfig.Transport.ServerList = []string{s.etcdURL}
	ro.SecureServing.Listener = ln
	// Stop must not wait out open watches: by default the HTTP server's shutdown waits up to
	// RequestTimeout (60 s) for them. End watches at shutdown and cap the drain at 2 s.
	o.ServerRunOptions.ShutdownSendRetryAfter = true
	o.ServerRunOptions.ShutdownWatchTerminationGracePeriod = time.Second
	ro.SecureServing.ServerCert.CertKey.CertFile = filepath.Join(s.dir, certFile)
	ro.SecureServing.ServerCert.CertKey.KeyFile = filepath.Join(s.dir, keyFile)
	if err := o.Complete(); err != nil {
		return fmt.Errorf("complete API server options: %w", err)
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("validate API server options: %w", err)
	}
	cfg, err := s.config(o)
	if err != nil {
		return err
	}
	completed := cfg.Complete()
	completed.GenericConfig.EnableDiscovery = true // Complete turns it off; kubectl needs /apis
	srv, err := completed.New(genericapiserver.NewEmptyDelegate())
	if err != nil {
		return fmt.Errorf("create API server: %w", err)
	}
	srv.GenericAPIServer.Handler.NonGoRestfulMux.Handle("/api", http.HandlerFunc(emptyCoreAPI))
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.runDone = make(chan error, 1)
	go func() { s.runDone <- srv.GenericAPIServer.PrepareRun().RunWithContext(ctx) }()
	return nil
}

// config is options.Config without its core-API informers (pitfall 1), with the persisted
// loopback token so that clients of an earlier run stay authorized.
func (s *Server) config(o *options.CustomResourceDefinitionsServerOptions) (*apiserver.Config, error) {
	sc := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	if err := o.ServerRunOptions.ApplyTo(&sc.Config); err != nil {
		return nil, fmt.Errorf("apply server run options: %w", err)
	}
	if err := o.RecommendedOptions.ApplyTo(sc); err != nil {
		return nil, fmt.Errorf("apply recommended options: %w", err)
	}
	if err := o.APIEnablement.ApplyTo(&sc.Config, apiserver.DefaultAPIResourceConfigSource(), apiserver.Scheme); err != nil {
		return nil, fmt.Errorf("apply API enablement: %w", err)
	}
	sc.LoopbackClientConfig.BearerToken = s.token
	defs := openapi.GetOpenAPIDefinitionsWithoutDisabledFeatures(generatedopenapi.GetOpenAPIDefinitions)
	sc.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(defs, openapinamer.NewDefinitionNamer(apiserver.Scheme))
	sc.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(defs, openapinamer.NewDefinitionNamer(apiserver.Scheme, scheme.Scheme))
	return &apiserver.Config{
		GenericConfig: sc,
		ExtraConfig: apiserver.ExtraConfig{
			CRDRESTOptionsGetter: options.NewCRDRESTOptionsGetter(*o.RecommendedOptions.Etcd, sc.ResourceTransformers, sc.StorageObjectCountTracker),
			ServiceResolver:      noServices{},
			AuthResolverWrapper:  webhook.NewDefaultAuthenticationInfoResolverWrapper(nil, nil, sc.LoopbackClientConfig, noopoteltrace.NewTracerProvider()),
		},
	}, nil
}

// noServices resolves no Service: the harness has no core API, so CRD conversion webhooks
// (which tink's CRDs do not use) cannot be reached.
type noServices struct{}

func (noServices) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	return nil, fmt.Errorf("resolve service %s/%s:%d: the test API server has no core API", namespace, name, port)
}

// emptyCoreAPI answers /api with no versions; kubectl's discovery fails on a 404 there.
func emptyCoreAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"kind":"APIVersions","versions":[],"serverAddressByClientCIDRs":[]}`)
}

// waitReady polls /readyz until it answers 200. It keeps waiting after ctx ends (up to
// startTimeout), because stopping the server before its post-start hooks finish makes the
// apiserver call os.Exit (klog.Fatalf: PostStartHook "crd-informer-synced" failed).
func (s *Server) waitReady(ctx context.Context) error {
	client, err := rest.HTTPClientFor(s.RESTConfig())
	if err != nil {
		return fmt.Errorf("build readiness client: %w", err)
	}
	var last string
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, startTimeout, true,
		func(context.Context) (bool, error) {
			select {
			case err := <-s.runDone:
				s.runDone <- err // keep it for Stop
				return false, fmt.Errorf("API server exited: %w", err)
			default:
			}
			resp, err := client.Get(s.url + "/readyz")
			if err != nil {
				last = err.Error()
				return false, nil
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
			return resp.StatusCode == http.StatusOK, nil
		})
	if err != nil {
		return fmt.Errorf("wait for %s/readyz (last answer %q): %w", s.url, last, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("start API server: %w", ctx.Err())
	}
	return nil
}
