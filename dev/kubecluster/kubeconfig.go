package kubecluster

import (
	"encoding/base64"
	"fmt"
	"os"
)

// writeKubeconfig writes a kubeconfig for one server (a URL: for a webhook, the exact URL it is
// posted to), the CA that signs its certificate, and a client certificate and key.
func writeKubeconfig(path, server string, caPEM, certPEM, keyPEM []byte) error {
	b64 := base64.StdEncoding.EncodeToString
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: user
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: context
  context:
    cluster: cluster
    user: user
current-context: context
`, server, b64(caPEM), b64(certPEM), b64(keyPEM))
	return os.WriteFile(path, []byte(text), 0o600)
}
