package kubeharness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// tinkModule is the module whose config/crd/bases holds the Tinkerbell CRDs.
const tinkModule = "github.com/tinkerbell/tink"

// locateCRDs returns dir, or tink's config/crd/bases found through the go command. CRD YAML is
// not Go code, so it cannot be embedded from another module, and -mod=vendor does not keep it.
func locateCRDs(ctx context.Context, dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", tinkModule).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = strings.TrimSpace(string(ee.Stderr))
		}
		return "", fmt.Errorf("locate %s's CRDs with `go list -m` (run inside the fleetd module, or set Options.CRDDir): %w %s", tinkModule, err, stderr)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" {
		return "", fmt.Errorf("locate %s's CRDs: `go list -m` printed no directory (is the module downloaded? try `go mod download %s`)", tinkModule, tinkModule)
	}
	return filepath.Join(mod, "config", "crd", "bases"), nil
}

// readCRDs decodes every *.yaml file in dir as one CustomResourceDefinition.
func readCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(names) == 0 {
		return nil, fmt.Errorf("read CRDs: no *.yaml in %s", dir)
	}
	sort.Strings(names)
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("read CRD: %w", err)
		}
		b = bytes.TrimPrefix(bytes.TrimSpace(b), []byte("---\n"))
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, fmt.Errorf("decode CRD %s: %w", n, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("decode CRD %s: kind is %q, want CustomResourceDefinition", n, crd.Kind)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// installCRDs creates or updates each CRD, then waits until all are Established and their
// resources are listed in discovery (after Established alone, REST mappers can still answer
// "no matches for kind").
func installCRDs(ctx context.Context, cfg *rest.Config, dir string) error {
	crds, err := readCRDs(dir)
	if err != nil {
		return err
	}
	cs, err := clientset.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("build CRD client: %w", err)
	}
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range crds {
		if err := applyCRD(ctx, api, crd); err != nil {
			return err
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("build discovery client: %w", err)
	}
	for _, crd := range crds {
		if err := waitServed(ctx, api, dc, crd); err != nil {
			return err
		}
	}
	return nil
}

type crdAPI interface {
	Get(ctx context.Context, name string, o metav1.GetOptions) (*apiextensionsv1.CustomResourceDefinition, error)
	Create(ctx context.Context, c *apiextensionsv1.CustomResourceDefinition, o metav1.CreateOptions) (*apiextensionsv1.CustomResourceDefinition, error)
	Update(ctx context.Context, c *apiextensionsv1.CustomResourceDefinition, o metav1.UpdateOptions) (*apiextensionsv1.CustomResourceDefinition, error)
}

func applyCRD(ctx context.Context, api crdAPI, crd *apiextensionsv1.CustomResourceDefinition) error {
	cur, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := api.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read CRD %s: %w", crd.Name, err)
	}
	cur.Spec = crd.Spec
	cur.Labels, cur.Annotations = crd.Labels, crd.Annotations
	if _, err := api.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update CRD %s: %w", crd.Name, err)
	}
	return nil
}

func waitServed(ctx context.Context, api crdAPI, dc discovery.DiscoveryInterface, crd *apiextensionsv1.CustomResourceDefinition) error {
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		cur, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		established := false
		for _, c := range cur.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		if !established {
			return false, nil
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			list, err := dc.ServerResourcesForGroupVersion(crd.Spec.Group + "/" + v.Name)
			if err != nil || !hasResource(list, crd.Spec.Names.Plural) {
				return false, nil
			}
			// Discovery can list the resource before the custom resource handler serves it.
			err = dc.RESTClient().Get().AbsPath("/apis", crd.Spec.Group, v.Name, crd.Spec.Names.Plural).
				Param("limit", "1").Do(ctx).Error()
			if err != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("wait for CRD %s to be established and discoverable: %w", crd.Name, err)
	}
	return nil
}

func hasResource(list *metav1.APIResourceList, plural string) bool {
	for _, r := range list.APIResources {
		if r.Name == plural {
			return true
		}
	}
	return false
}
