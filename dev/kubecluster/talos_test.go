package kubecluster

import (
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	apiserverv1beta1 "k8s.io/apiserver/pkg/apis/apiserver/v1beta1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/render"
)

// What Talos's controller makes of the configured list: none is Node, RBAC; a list without Node
// gets it first, without RBAC gets it second, whatever comes before.
func TestCompleteTalosAuthorizers(t *testing.T) {
	w, n, r := talosAuthorizer{typ: "Webhook", name: "w"}, talosAuthorizer{typ: "Node", name: "node"}, talosAuthorizer{typ: "RBAC", name: "rbac"}
	for _, tc := range []struct{ given, want []talosAuthorizer }{
		{nil, []talosAuthorizer{n, r}},
		{[]talosAuthorizer{w}, []talosAuthorizer{n, r, w}},
		{[]talosAuthorizer{w, n}, []talosAuthorizer{w, r, n}},
		{[]talosAuthorizer{w, n, r}, []talosAuthorizer{w, n, r}},
	} {
		if got := completeTalosAuthorizers(tc.given); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%v: got %v, want %v", tc.given, got, tc.want)
		}
	}
}

// The authorization configuration written from a Talos control plane config fleetd rendered is
// Talos's version, lists fleetd's webhook first, and names the kubeconfig the config's machine
// file and extra volume put in the API server's file system, which client-go reads as the URL.
func TestWriteTalosAuthorization(t *testing.T) {
	clock := fleet.SystemClock{}
	secrets, err := render.GenerateTalosSecrets(clock)
	if err != nil {
		t.Fatal(err)
	}
	const url = "https://127.0.0.1:9443/v1/cluster/authorize"
	ca, err := newAuthority(t.TempDir(), "ca", "webhook-ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.issue(leaf{cn: "kube-apiserver"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := render.New(render.Config{TalosSecrets: secrets, TalosVersion: "v1.11", ClusterName: "lab", ClusterEndpoint: "https://10.0.0.2:6443",
		DNS: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Gateway: netip.MustParseAddr("10.0.0.1"), Clock: clock, Random: rand.Reader,
		AuthzWebhook: &render.AuthzWebhook{URL: url, ServerCA: ca.pem, ClientCert: cert, ClientKey: key}})
	if err != nil {
		t.Fatal(err)
	}
	d := fleet.Device{ID: 1, Name: "cp-1", Address: netip.MustParsePrefix("10.0.0.2/24"), MACs: []fleet.MAC{"3c:ec:ef:4c:4f:54"},
		Declared: fleet.Declaration{DiskSerial: "S123"}}
	nc, err := r.Render(d, fleet.Class{Name: "cp", Kind: fleet.KindTalos, Installable: true, JoinsKubernetes: true,
		Talos: &fleet.TalosClass{MachineType: "controlplane"}}, fleet.NodeIdentity{BootstrapToken: fleet.BootstrapToken{ID: "cp1abc", Secret: "0123456789abcdef"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, err := writeTalosAuthorization(nc.Body, dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg apiserverv1beta1.AuthorizationConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.APIVersion != talosAuthorizationAPIVersion || len(cfg.Authorizers) != 3 || cfg.Authorizers[0].Type != "Webhook" ||
		cfg.Authorizers[1].Type != "Node" || cfg.Authorizers[2].Type != "RBAC" || cfg.Authorizers[0].Webhook == nil {
		t.Fatalf("the configuration Talos writes:\n%s", b)
	}
	wh := cfg.Authorizers[0].Webhook
	if wh.UnauthorizedTTL.Duration.String() != "30s" || wh.FailurePolicy != "NoOpinion" || len(wh.MatchConditions) != 1 {
		t.Errorf("fleetd's webhook:\n%s", b)
	}
	want := filepath.Join(dir, "root", "etc/kubernetes/fleetd-authz/webhook.kubeconfig")
	if k := wh.ConnectionInfo.KubeConfigFile; k == nil || *k != want {
		t.Fatalf("kubeConfigFile %v, want %s", k, want)
	}
	kc, err := clientcmd.LoadFromFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if rc, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig(); err != nil || rc.Host != url {
		t.Errorf("the kubeconfig: %v, host %q, want %s", err, rc.Host, url)
	}
}
