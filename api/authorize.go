package api

// The cluster's authorization webhook (docs/http.md, "The cluster's authorization webhook"): the
// SubjectAccessReview of authorization.k8s.io/v1 the workload cluster's kube-apiserver posts and
// fleetd answers. These are the members fleetd reads and writes, named as k8s.io/api's
// authorization/v1 types name them in JSON; a member the API server sends that is not here is
// ignored (the handler reads leniently), so that fleetd needs no Kubernetes module to answer.

// The object's kind and version: the authorization configuration's subjectAccessReviewVersion v1.
const (
	SubjectAccessReviewAPIVersion = "authorization.k8s.io/v1"
	SubjectAccessReviewKind       = "SubjectAccessReview"
)

// SubjectAccessReview is the request and the answer.
type SubjectAccessReview struct {
	APIVersion string                    `json:"apiVersion"`
	Kind       string                    `json:"kind"`
	Spec       SubjectAccessReviewSpec   `json:"spec"`
	Status     SubjectAccessReviewStatus `json:"status"`
}

// SubjectAccessReviewSpec is who asks to do what. Exactly one of the attributes is set.
type SubjectAccessReviewSpec struct {
	ResourceAttributes    *ResourceAttributes    `json:"resourceAttributes,omitempty"`
	NonResourceAttributes *NonResourceAttributes `json:"nonResourceAttributes,omitempty"`
	User                  string                 `json:"user,omitempty"`
	Groups                []string               `json:"groups,omitempty"`
	UID                   string                 `json:"uid,omitempty"`
}

// ResourceAttributes are a request of a resource.
type ResourceAttributes struct {
	Namespace   string `json:"namespace,omitempty"`
	Verb        string `json:"verb,omitempty"`
	Group       string `json:"group,omitempty"`
	Version     string `json:"version,omitempty"`
	Resource    string `json:"resource,omitempty"`
	Subresource string `json:"subresource,omitempty"`
	Name        string `json:"name,omitempty"`
}

// NonResourceAttributes are a request of a path that is no resource.
type NonResourceAttributes struct {
	Path string `json:"path,omitempty"`
	Verb string `json:"verb,omitempty"`
}

// SubjectAccessReviewStatus is the answer: Denied with a Reason, or neither Allowed nor Denied
// (no opinion). fleetd never sets Allowed.
type SubjectAccessReviewStatus struct {
	Allowed bool   `json:"allowed"`
	Denied  bool   `json:"denied,omitempty"`
	Reason  string `json:"reason,omitempty"`
}
