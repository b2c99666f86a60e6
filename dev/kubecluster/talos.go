package kubecluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"k8s.io/apimachinery/pkg/runtime"
	k8sjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	apiserverv1beta1 "k8s.io/apiserver/pkg/apis/apiserver/v1beta1"
)

// talosAuthorizationAPIVersion is the version Talos writes the authorization configuration in for
// a kube-apiserver of Kubernetes 1.30 or later (siderolabs/go-kubernetes v0.2.26, the one Talos
// v1.11.5 uses: kubernetes/compatibility KubeAPIServerAuthorizationConfigAPIVersion).
const talosAuthorizationAPIVersion = "apiserver.config.k8s.io/v1beta1"

// talosAuthorizer is one authorizer as Talos's machined holds it (k8s.AuthorizationAuthorizersSpec).
type talosAuthorizer struct {
	typ, name string
	webhook   map[string]any
}

// writeTalosAuthorization writes into dir the kube-apiserver's authorization configuration that
// Talos v1.11.5's machined makes of the control plane config body, and returns its path:
//
//   - the list as k8s.ControlPlaneAuthorizationController completes it
//     (internal/app/machined/pkg/controllers/k8s/control_plane.go): none configured is Node then
//     RBAC; otherwise the configured ones in order, with Node inserted first and RBAC second when
//     the list has none of that type;
//   - converted and encoded as k8s.RenderConfigsStaticPodController writes it
//     (render_config_static_pods.go authorizationConfig): each webhook's unstructured map into the
//     typed WebhookConfiguration (runtime.DefaultUnstructuredConverter), the whole as strict,
//     pretty YAML.
//
// The files kube-apiserver sees through cluster.apiServer.extraVolumes are the config's
// machine.files under a volume's hostPath: each is written at dir/root plus its path in the pod,
// and a kubeConfigFile naming a path in the pod names that file instead (dir/root stands for the
// pod's file system; read-only mounts are not enforced).
func writeTalosAuthorization(body []byte, dir string) (string, error) {
	p, err := configloader.NewFromBytes(body)
	if err != nil {
		return "", fmt.Errorf("load the Talos config: %w", err)
	}
	if p.Cluster() == nil || p.Machine() == nil {
		return "", errors.New("the Talos config is not a control plane's: no cluster or machine section")
	}
	api := p.Cluster().APIServer()
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	files, err := p.Machine().Files()
	if err != nil {
		return "", err
	}
	for _, v := range api.ExtraVolumes() {
		for _, f := range files {
			rel, err := filepath.Rel(v.HostPath(), f.Path())
			if err != nil || strings.HasPrefix(rel, "..") {
				continue
			}
			at := filepath.Join(root, v.MountPath(), rel)
			if err := os.MkdirAll(filepath.Dir(at), 0o700); err != nil {
				return "", err
			}
			if err := os.WriteFile(at, []byte(f.Content()), f.Permissions().Perm()); err != nil {
				return "", err
			}
		}
	}
	var list []talosAuthorizer
	for _, a := range api.AuthorizationConfig() {
		list = append(list, talosAuthorizer{typ: a.Type(), name: a.Name(), webhook: a.Webhook()})
	}
	cfg := apiserverv1beta1.AuthorizationConfiguration{}
	cfg.APIVersion, cfg.Kind = talosAuthorizationAPIVersion, "AuthorizationConfiguration"
	for _, a := range completeTalosAuthorizers(list) {
		ac := apiserverv1beta1.AuthorizerConfiguration{Type: a.typ, Name: a.name}
		if a.webhook != nil {
			var wc apiserverv1beta1.WebhookConfiguration
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(a.webhook, &wc); err != nil {
				return "", fmt.Errorf("convert the %s authorizer's webhook as Talos does: %w", a.name, err)
			}
			if k := wc.ConnectionInfo.KubeConfigFile; k != nil {
				inRoot := filepath.Join(root, *k)
				wc.ConnectionInfo.KubeConfigFile = &inRoot
			}
			ac.Webhook = &wc
		}
		cfg.Authorizers = append(cfg.Authorizers, ac)
	}
	var buf bytes.Buffer
	enc := k8sjson.NewSerializerWithOptions(k8sjson.DefaultMetaFactory, nil, nil, k8sjson.SerializerOptions{Yaml: true, Pretty: true, Strict: true})
	if err := enc.Encode(&cfg, &buf); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "authorization-config.yaml")
	return path, os.WriteFile(path, buf.Bytes(), 0o600)
}

// completeTalosAuthorizers is the list as Talos's controller completes it (above).
func completeTalosAuthorizers(list []talosAuthorizer) []talosAuthorizer {
	if list == nil {
		return []talosAuthorizer{{typ: "Node", name: "node"}, {typ: "RBAC", name: "rbac"}}
	}
	has := func(typ string) bool {
		for _, a := range list {
			if a.typ == typ {
				return true
			}
		}
		return false
	}
	if !has("Node") {
		list = append([]talosAuthorizer{{typ: "Node", name: "node"}}, list...)
	}
	if !has("RBAC") {
		list = append(list[:1], append([]talosAuthorizer{{typ: "RBAC", name: "rbac"}}, list[1:]...)...)
	}
	return list
}
