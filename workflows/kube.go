package workflows

import (
	"context"
	"fmt"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// The resources of Tinkerbell's API group that fleetd reads and writes (tink v0.12.2's CRDs).
var (
	hardwareResource = tinkv1.GroupVersion.WithResource("hardware")
	templateResource = tinkv1.GroupVersion.WithResource("templates")
	workflowResource = tinkv1.GroupVersion.WithResource("workflows")
)

// kube is the Installer's client of Tinkerbell's objects in one namespace, on client-go's
// dynamic client: objects travel as unstructured JSON, converted to tink v0.12.2's types where
// fleetd builds a new one (a Workflow) or reads fields both Tinkerbell versions share, read as
// JSON where fleetd reads both versions' status (status.go), and changed only by merge patches
// of fleetd's own fields (a Hardware: hardware.go), never written whole from Go types that would
// drop a newer version's fields. It is not controller-runtime's client, whose package registers every
// built-in Kubernetes API group's types when the process starts: 15 MiB of resident memory, as
// measured on the development stack (amd64), for types fleetd never uses (docs/operate.md,
// "Memory"). Errors are the API server's, as client-go returns them (apierrors.IsNotFound,
// IsConflict, ...).
type kube struct {
	dyn dynamic.Interface
	ns  string
}

func (k kube) resource(r schema.GroupVersionResource) dynamic.ResourceInterface {
	return k.dyn.Resource(r).Namespace(k.ns)
}

// get reads the object name of resource r as JSON.
func (k kube) get(ctx context.Context, r schema.GroupVersionResource, name string) (*unstructured.Unstructured, error) {
	return k.resource(r).Get(ctx, name, metav1.GetOptions{})
}

// getTyped reads the object name of resource r into obj, a tink v0.12.2 type.
func (k kube) getTyped(ctx context.Context, r schema.GroupVersionResource, name string, obj runtime.Object) error {
	u, err := k.get(ctx, r, name)
	if err != nil {
		return err
	}
	return fromUnstructured(u, obj)
}

// create creates obj (a tink v0.12.2 object of kind) and reads what the server stored back into
// it.
func (k kube) create(ctx context.Context, r schema.GroupVersionResource, kind string, obj runtime.Object) error {
	return write(kind, obj, func(u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return k.resource(r).Create(ctx, u, createOptions)
	})
}

// createOptions are the options of every create.
var createOptions = metav1.CreateOptions{}

// mergePatch applies a JSON merge patch (RFC 7386) to the object name of resource r: only the
// fields the patch names change, whatever fields the object has that fleetd's Go types lack. A
// patch that carries metadata.resourceVersion is a conflict when the object changed since.
func (k kube) mergePatch(ctx context.Context, r schema.GroupVersionResource, name string, patch []byte) error {
	_, err := k.resource(r).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// write sends obj through send as JSON and reads the server's answer back into obj.
func write(kind string, obj runtime.Object, send func(*unstructured.Unstructured) (*unstructured.Unstructured, error)) error {
	u, err := toUnstructured(obj, kind)
	if err != nil {
		return err
	}
	if u, err = send(u); err != nil {
		return err
	}
	return fromUnstructured(u, obj)
}

// list reads one page of resource r.
func (k kube) list(ctx context.Context, r schema.GroupVersionResource, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	return k.resource(r).List(ctx, opts)
}

// watch watches resource r; its events carry *unstructured.Unstructured.
func (k kube) watch(ctx context.Context, r schema.GroupVersionResource, opts metav1.ListOptions) (watch.Interface, error) {
	return k.resource(r).Watch(ctx, opts)
}

func toUnstructured(obj runtime.Object, kind string) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", kind, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(tinkv1.GroupVersion.WithKind(kind))
	return u, nil
}

func fromUnstructured(u *unstructured.Unstructured, obj runtime.Object) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return fmt.Errorf("decode %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}
