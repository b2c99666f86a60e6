package kubecluster

import (
	"bytes"
	"context"
	"fmt"
	"os"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/folly-infra/fleetd/fleet"
)

// ApplyRBAC creates the RBAC objects of a manifest such as examples/cluster/fleetd-rbac.yaml, as an
// operator applies it: fleetd then has exactly the permissions the example grants. Objects that
// exist already are left as they are.
func ApplyRBAC(ctx context.Context, admin kubernetes.Interface, file string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read fleetd's RBAC example: %w", err)
	}
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		var err error
		switch meta.Kind {
		case "ClusterRole":
			var o rbacv1.ClusterRole
			if err = yaml.UnmarshalStrict(doc, &o); err == nil {
				_, err = admin.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
			}
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			if err = yaml.UnmarshalStrict(doc, &o); err == nil {
				_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
			}
		case "Role":
			var o rbacv1.Role
			if err = yaml.UnmarshalStrict(doc, &o); err == nil {
				_, err = admin.RbacV1().Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
			}
		case "RoleBinding":
			var o rbacv1.RoleBinding
			if err = yaml.UnmarshalStrict(doc, &o); err == nil {
				_, err = admin.RbacV1().RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
			}
		default:
			return fmt.Errorf("%s has a %q document, which ApplyRBAC does not apply", file, meta.Kind)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("apply %s %s: %w", file, meta.Kind, err)
		}
	}
	return nil
}

// BindBootstrappers binds the group of the nodes' bootstrap tokens to system:node-bootstrapper,
// as Talos's control plane does (its manifest system-bootstrap-node-bootstrapper): a bootstrap
// token may then create a CSR and read it back.
func BindBootstrappers(ctx context.Context, admin kubernetes.Interface) error {
	b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system-bootstrap-node-bootstrapper"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-bootstrapper"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: fleet.BootstrapGroup}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bind %s to system:node-bootstrapper: %w", fleet.BootstrapGroup, err)
	}
	return nil
}
