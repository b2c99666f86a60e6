package render_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"path"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/render"
)

// testPEM returns a self-signed certificate (a CA when ca) and its key, PEM.
func testPEM(t *testing.T, cn string, ca bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, IsCA: ca, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func testAuthzWebhook(t *testing.T) *render.AuthzWebhook {
	t.Helper()
	ca, _ := testPEM(t, "webhook-ca", true)
	cert, key := testPEM(t, "kube-apiserver", false)
	return &render.AuthzWebhook{URL: "https://spore.lan:9443/v1/cluster/authorize", ServerCA: ca, ClientCert: cert, ClientKey: key}
}

// wantWebhook is the webhook authorizer of docs/operate.md ("Cluster membership"), as Talos
// reads it from the loaded config (YAML's types).
var wantWebhook = map[string]any{
	"timeout":                    "3s",
	"subjectAccessReviewVersion": "v1",
	"matchConditionSubjectAccessReviewVersion": "v1",
	"failurePolicy":   "NoOpinion",
	"authorizedTTL":   "30s",
	"unauthorizedTTL": "30s",
	"connectionInfo":  map[string]any{"type": "KubeConfigFile", "kubeConfigFile": "/etc/kubernetes/fleetd-authz/webhook.kubeconfig"},
	"matchConditions": []any{map[string]any{"expression": "'system:nodes' in request.groups"}},
}

// TestControlPlaneAsksFleetdFirst: with the webhook configured, a joining class's control plane
// config, loaded back as machined loads it, lists fleetd's webhook first and Node and RBAC after
// it (so Talos adds neither in front: talosAuthorizers), carries the webhook's kubeconfig as a
// machine file under /var that client-go reads as the configured URL, CA and client certificate,
// and mounts its directory read only into the API server where the webhook's kubeConfigFile
// names it. A class's own authorizer comes after fleetd's (its patches come after). A joining
// worker, a control plane outside the cluster, and a renderer without the webhook get none of it.
func TestControlPlaneAsksFleetdFirst(t *testing.T) {
	w := testAuthzWebhook(t)
	with := newTestRenderer(t, func(c *render.Config) { c.AuthzWebhook = w })
	without := newTestRenderer(t, nil)
	d := renderDevice("cp-1", "3c:ec:ef:4c:4f:54", "10.0.0.5/24", "S123")
	joiningCP, joiningWorker := talosCP, talosWorker
	joiningCP.JoinsKubernetes, joiningWorker.JoinsKubernetes = true, true
	classAuthorizer := withPatches(joiningCP, patch(t, `{"cluster":{"apiServer":{"authorizationConfig":[{"type":"Webhook","name":"site","webhook":{"timeout":"1s","subjectAccessReviewVersion":"v1","failurePolicy":"NoOpinion","connectionInfo":{"type":"InClusterConfig"}}}]}}}`))
	for _, tc := range []struct {
		name  string
		r     *render.Renderer
		class fleet.Class
		want  []string // the authorizers Talos writes, type/name; nil: Talos's defaults, none given
	}{
		{"ok/joining-control-plane", with, joiningCP, []string{"Webhook/fleetd", "Node/node", "RBAC/rbac"}},
		{"ok/class-authorizer-after-fleetd", with, classAuthorizer, []string{"Webhook/fleetd", "Node/node", "RBAC/rbac", "Webhook/site"}},
		{"ok/joining-worker-gets-none", with, joiningWorker, nil},
		{"ok/control-plane-outside-gets-none", with, talosCP, nil},
		{"ok/no-webhook-configured", without, joiningCP, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := tc.r.Render(d, tc.class, renderID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := render.ValidateTalosConfig(nc.Body); err != nil {
				t.Fatal(err)
			}
			p, err := configloader.NewFromBytes(nc.Body)
			if err != nil {
				t.Fatal(err)
			}
			api := p.Cluster().APIServer()
			got := talosAuthorizers(api.AuthorizationConfig())
			if tc.want == nil {
				if len(api.AuthorizationConfig()) != 0 || len(api.ExtraVolumes()) != 0 || authzFile(t, p) != nil {
					t.Fatalf("got fleetd's authorization: authorizers %v, volumes %v", got, api.ExtraVolumes())
				}
				return
			}
			var names []string
			for _, a := range got {
				names = append(names, a.typ+"/"+a.name)
			}
			if !reflect.DeepEqual(names, tc.want) {
				t.Fatalf("the authorizers Talos writes: %v, want %v", names, tc.want)
			}
			if !reflect.DeepEqual(got[0].webhook, wantWebhook) {
				t.Errorf("fleetd's webhook:\n%#v\nwant\n%#v", got[0].webhook, wantWebhook)
			}
			checkAuthzFile(t, p, w)
		})
	}
}

// authorizer is one entry of the authorization configuration Talos writes.
type authorizer struct {
	typ, name string
	webhook   map[string]any
}

// talosAuthorizers is what Talos v1.11.5's k8s.ControlPlaneAuthorizationController makes of the
// configured authorizers (internal/app/machined/pkg/controllers/k8s/control_plane.go): none
// given is Node then RBAC; otherwise the given ones in order, with Node inserted first and RBAC
// second when the list has none of that type.
func talosAuthorizers(given []talosconfig.AuthorizationConfigAuthorizer) []authorizer {
	if given == nil {
		return []authorizer{{typ: "Node", name: "node"}, {typ: "RBAC", name: "rbac"}}
	}
	var out []authorizer
	has := map[string]bool{}
	for _, a := range given {
		out = append(out, authorizer{typ: a.Type(), name: a.Name(), webhook: a.Webhook()})
		has[a.Type()] = true
	}
	if !has["Node"] {
		out = append([]authorizer{{typ: "Node", name: "node"}}, out...)
	}
	if !has["RBAC"] {
		out = append(out[:1], append([]authorizer{{typ: "RBAC", name: "rbac"}}, out[1:]...)...)
	}
	return out
}

// authzFile is the machine file of the webhook's kubeconfig, or nil.
func authzFile(t *testing.T, p config.Provider) talosconfig.File {
	t.Helper()
	files, err := p.Machine().Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f.Path(), ".kubeconfig") {
			return f
		}
	}
	return nil
}

// checkAuthzFile: the kubeconfig the webhook names is a machine file Talos creates (under /var,
// op create), readable by kube-apiserver's uid, inside a directory mounted read only into the
// API server at the path the webhook names, and client-go reads from it the configured URL, CA
// and client certificate and key.
func checkAuthzFile(t *testing.T, p config.Provider, w *render.AuthzWebhook) {
	t.Helper()
	f := authzFile(t, p)
	if f == nil {
		t.Fatal("no kubeconfig among machine.files")
	}
	if f.Op() != "create" || !strings.HasPrefix(f.Path(), "/var/") || f.Permissions().Perm() != 0o644 {
		t.Errorf("machine file %s op %s mode %v, want create under /var, 0644", f.Path(), f.Op(), f.Permissions())
	}
	inPod := ""
	for _, v := range p.Cluster().APIServer().ExtraVolumes() {
		if v.HostPath() == path.Dir(f.Path()) && v.ReadOnly() {
			inPod = path.Join(v.MountPath(), path.Base(f.Path()))
		}
	}
	if want := wantWebhook["connectionInfo"].(map[string]any)["kubeConfigFile"]; inPod != want {
		t.Errorf("the kubeconfig is at %q in the API server (extraVolumes %v), the webhook names %q", inPod, p.Cluster().APIServer().ExtraVolumes(), want)
	}
	kc, err := clientcmd.Load([]byte(f.Content()))
	if err != nil {
		t.Fatalf("client-go cannot read the kubeconfig: %v", err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != w.URL || !bytes.Equal(rc.CAData, w.ServerCA) || !bytes.Equal(rc.CertData, w.ClientCert) || !bytes.Equal(rc.KeyData, w.ClientKey) {
		t.Errorf("kubeconfig: host %q, CA/cert/key as configured: %v %v %v", rc.Host,
			bytes.Equal(rc.CAData, w.ServerCA), bytes.Equal(rc.CertData, w.ClientCert), bytes.Equal(rc.KeyData, w.ClientKey))
	}
}

// TestControlPlaneAuthzRefusals: a class patch that sets kube-apiserver's authorization-mode
// flag is refused with Talos's own message (Talos takes either the flag or the configuration),
// and a renderer is not made with a webhook the API server could not use.
func TestControlPlaneAuthzRefusals(t *testing.T) {
	w := testAuthzWebhook(t)
	r := newTestRenderer(t, func(c *render.Config) { c.AuthzWebhook = w })
	joiningCP := withPatches(talosCP, patch(t, `{"cluster":{"apiServer":{"extraArgs":{"authorization-mode":"Node,RBAC"}}}}`))
	joiningCP.JoinsKubernetes = true
	_, err := r.Render(renderDevice("cp-1", "3c:ec:ef:4c:4f:54", "10.0.0.5/24", "S123"), joiningCP, renderID)
	if !errors.Is(err, fleet.ErrConfigRejected) || !strings.Contains(err.Error(), "authorization-mode cannot be used in conjunction with AuthorizationConfig") {
		t.Errorf("refuse/authorization-mode-flag: %v, want Talos's refusal", err)
	}

	_, otherKey := testPEM(t, "other", false)
	for name, tc := range map[string]struct {
		edit func(*render.AuthzWebhook)
		want string
	}{
		"refuse/plain-http-url": {func(w *render.AuthzWebhook) { w.URL = "http://spore.lan:9443/v1/cluster/authorize" }, "is not an https URL with a host"},
		"refuse/ca-not-pem":     {func(w *render.AuthzWebhook) { w.ServerCA = []byte("x\n") }, "server CA holds no PEM certificate"},
		"refuse/another-key":    {func(w *render.AuthzWebhook) { w.ClientKey = otherKey }, "private key does not match public key"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := *w
			tc.edit(&bad)
			cfg := render.Config{AuthzWebhook: &bad}
			if _, err := render.New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want %q", err, tc.want)
			}
		})
	}
}
