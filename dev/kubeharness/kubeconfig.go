package kubeharness

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeconfigName is the cluster, user and context name in written kubeconfigs.
const kubeconfigName = "kubeharness"

// WriteKubeconfig writes a kubeconfig for this server to path (mode 0600), usable by kubectl and
// by fleetd's --kubeconfig: the server URL, the serving certificate embedded as CA data, and the
// loopback bearer token. Both stay valid across restarts on the same Dir; the URL changes when
// the port does.
func (s *Server) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[kubeconfigName] = &clientcmdapi.Cluster{Server: s.url, CertificateAuthorityData: s.caPEM}
	cfg.AuthInfos[kubeconfigName] = &clientcmdapi.AuthInfo{Token: s.token}
	cfg.Contexts[kubeconfigName] = &clientcmdapi.Context{Cluster: kubeconfigName, AuthInfo: kubeconfigName}
	cfg.CurrentContext = kubeconfigName
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encode kubeconfig: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create kubeconfig dir: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}
