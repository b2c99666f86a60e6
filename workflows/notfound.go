package workflows

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// objectNotFound reports whether err is the API server saying that the object does not exist.
//
// A 404 whose body is not a Kubernetes Status is not that: the server does not serve the
// resource at all — its CRD is not installed, or not yet established while the API server
// restarts (it answers "404 page not found" until its CRD informer has synced). The object may
// well exist then; treating the answer as "no such Workflow" or "no such Template" would fail a
// running request for a moment's outage (found by the chaos tests, dev/stack/chaos). client-go
// marks such answers with a cause of type UnexpectedServerResponse.
func objectNotFound(err error) bool {
	if !apierrors.IsNotFound(err) {
		return false
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Details != nil {
		for _, c := range se.Status().Details.Causes {
			if c.Type == metav1.CauseTypeUnexpectedServerResponse {
				return false
			}
		}
	}
	return true
}
