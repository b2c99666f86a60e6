package fleet

// CSR is a Kubernetes CertificateSigningRequest (certificates.k8s.io/v1) as fleetd's approver
// decides on it (membership.go). Every field but Request is what the API server recorded of its
// creator; Request is the PEM the creator sent, whose content is its claim.
type CSR struct {
	Name       string
	UID        string
	SignerName string   // spec.signerName
	Username   string   // spec.username: who the API server authenticated the creator as
	Groups     []string // spec.groups
	Usages     []string // spec.usages
	Request    []byte   // spec.request: a PEM "CERTIFICATE REQUEST"
}

// The signers fleetd decides for (k8s.io/api/certificates/v1).
const (
	SignerKubeletClient  = "kubernetes.io/kube-apiserver-client-kubelet"
	SignerKubeletServing = "kubernetes.io/kubelet-serving"
)

// CSRDecision is fleetd's answer to a CSR: approved or denied, with the condition's reason (one
// CamelCase word) and a message naming what was wrong and what to do.
type CSRDecision struct {
	Approve bool
	Reason  string
	Message string
}
