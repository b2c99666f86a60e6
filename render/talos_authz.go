package render

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"path"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AuthzWebhook is fleetd's authorization webhook as the API server of a joining class's control
// plane reaches it (docs/operate.md, "Cluster membership"). Its client key is a secret like the
// cluster CA keys the same configs carry (docs/security.md).
type AuthzWebhook struct {
	// URL is the webhook's full URL, https://NAME:PORT/v1/cluster/authorize, NAME a name of the
	// webhook's serving certificate.
	URL string
	// ServerCA is the PEM CA that verifies the webhook's serving certificate.
	ServerCA []byte
	// ClientCert and ClientKey are the PEM client certificate the API server presents (of the
	// webhook's client CA) and its key.
	ClientCert, ClientKey []byte
}

// Where the webhook's kubeconfig is on a control plane node and in its kube-apiserver container.
// Talos creates machine files only under /var (checkTalosFile) and mounts a directory of the
// host into its kube-apiserver static pod through cluster.apiServer.extraVolumes. The directory
// is mounted, not the file, so a rewritten file is seen without the pod being made again.
const (
	authzHostDir  = "/var/lib/fleetd-authz"
	authzMountDir = "/etc/kubernetes/fleetd-authz"
	authzFileName = "webhook.kubeconfig"
	// authzFileMode: Talos writes machine files as root and has no owner for them, while its
	// kube-apiserver runs as uid 65534 (talos pkg/machinery/constants KubernetesAPIServerRunUser),
	// so the file must be readable by all to be readable by it.
	authzFileMode = 0o644
)

// checkAuthzWebhook refuses what the API server could not use: a URL other than https with a
// host, a CA file without a certificate, a client certificate and key that are not a pair.
// Which names and CAs match one another is checked when fleetd's configuration is (config).
func checkAuthzWebhook(w *AuthzWebhook) []error {
	var errs []error
	if u, err := url.Parse(w.URL); err != nil || u.Scheme != "https" || u.Hostname() == "" {
		errs = append(errs, fmt.Errorf("the authorization webhook's URL %q is not an https URL with a host", w.URL))
	}
	if !x509.NewCertPool().AppendCertsFromPEM(w.ServerCA) {
		errs = append(errs, errors.New("the authorization webhook's server CA holds no PEM certificate"))
	}
	if _, err := tls.X509KeyPair(w.ClientCert, w.ClientKey); err != nil {
		errs = append(errs, fmt.Errorf("the API server's webhook client certificate and key: %w", err))
	}
	return errs
}

// authzKubeconfig is the kubeconfig the API server dials the webhook with: the webhook's URL as
// the cluster's server (the API server posts to exactly that URL), its CA, the client
// certificate and key.
func authzKubeconfig(w *AuthzWebhook) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["fleetd"] = &clientcmdapi.Cluster{Server: w.URL, CertificateAuthorityData: w.ServerCA}
	kc.AuthInfos["kube-apiserver"] = &clientcmdapi.AuthInfo{ClientCertificateData: w.ClientCert, ClientKeyData: w.ClientKey}
	kc.Contexts["fleetd"] = &clientcmdapi.Context{Cluster: "fleetd", AuthInfo: "kube-apiserver"}
	kc.CurrentContext = "fleetd"
	return clientcmd.Write(*kc)
}

// authzPatch is the part of a joining class's control plane config that makes its API server
// ask fleetd first: the kubeconfig as a machine file, its directory mounted read only into the
// kube-apiserver, and the structured authorization configuration docs/operate.md ("Cluster
// membership") shows. Talos (v1.11, internal/app/machined/pkg/controllers/k8s/control_plane.go,
// NewControlPlaneAuthorizationController) puts a Node authorizer first and RBAC second when the
// list has none of them, so both are listed here, after the webhook: otherwise Node would allow
// a node's requests before fleetd is asked.
func authzPatch(w *AuthzWebhook) (configpatcher.Patch, error) {
	kubeconfig, err := authzKubeconfig(w)
	if err != nil {
		return nil, fmt.Errorf("write the authorization webhook's kubeconfig: %w", err)
	}
	webhook := map[string]any{
		"timeout":                    "3s",
		"subjectAccessReviewVersion": "v1",
		"matchConditionSubjectAccessReviewVersion": "v1",
		"failurePolicy":   "NoOpinion", // fleetd down must not take the cluster down
		"authorizedTTL":   "30s",       // fleetd never allows
		"unauthorizedTTL": "30s",       // how long a no opinion outlives a wipe's claim
		"connectionInfo": map[string]any{
			"type":           "KubeConfigFile",
			"kubeConfigFile": path.Join(authzMountDir, authzFileName),
		},
		"matchConditions": []any{map[string]any{"expression": "'system:nodes' in request.groups"}},
	}
	cfg := &v1alpha1.Config{
		MachineConfig: &v1alpha1.MachineConfig{MachineFiles: []*v1alpha1.MachineFile{{
			FilePath: path.Join(authzHostDir, authzFileName), FilePermissions: authzFileMode, FileOp: "create",
			FileContent: string(kubeconfig),
		}}},
		ClusterConfig: &v1alpha1.ClusterConfig{APIServerConfig: &v1alpha1.APIServerConfig{
			ExtraVolumesConfig: []v1alpha1.VolumeMountConfig{{VolumeHostPath: authzHostDir, VolumeMountPath: authzMountDir, VolumeReadOnly: true}},
			AuthorizationConfigConfig: v1alpha1.AuthorizationConfigAuthorizerConfigList{
				{AuthorizerType: "Webhook", AuthorizerName: "fleetd", AuthorizerWebhook: v1alpha1.Unstructured{Object: webhook}},
				{AuthorizerType: "Node", AuthorizerName: "node"},
				{AuthorizerType: "RBAC", AuthorizerName: "rbac"},
			},
		}},
	}
	return configpatcher.NewStrategicMergePatch(container.NewV1Alpha1(cfg)), nil
}
