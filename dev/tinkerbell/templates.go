package tinkerbell

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// LoadTemplates decodes every *.yaml file at the root of fsys as one Template manifest
// (examples/tinkerbell's exampletemplates.FS, for instance), sorted by file name.
func LoadTemplates(fsys fs.FS) ([]*tinkv1.Template, error) {
	names, err := fs.Glob(fsys, "*.yaml")
	if err != nil || len(names) == 0 {
		return nil, fmt.Errorf("load Templates: no *.yaml files (%v)", err)
	}
	sort.Strings(names)
	var out []*tinkv1.Template
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, fmt.Errorf("load Template %s: %w", n, err)
		}
		t := &tinkv1.Template{}
		if err := yaml.UnmarshalStrict(b, t); err != nil {
			return nil, fmt.Errorf("decode Template %s: %w", n, err)
		}
		if t.Kind != "Template" || t.Name == "" || t.Spec.Data == nil {
			return nil, fmt.Errorf("decode Template %s: want kind Template with a name and spec.data", path.Base(n))
		}
		out = append(out, t)
	}
	return out, nil
}

// InstallTemplates creates or updates each Template of fsys in namespace.
func InstallTemplates(ctx context.Context, c client.Client, namespace string, fsys fs.FS) error {
	tpls, err := LoadTemplates(fsys)
	if err != nil {
		return err
	}
	for _, t := range tpls {
		t.Namespace = namespace
		cur := &tinkv1.Template{}
		err := c.Get(ctx, client.ObjectKeyFromObject(t), cur)
		switch {
		case apierrors.IsNotFound(err):
			err = c.Create(ctx, t)
		case err == nil:
			cur.Spec = t.Spec
			cur.Labels = t.Labels
			err = c.Update(ctx, cur)
		}
		if err != nil {
			return fmt.Errorf("install Template %s in namespace %s: %w", t.Name, namespace, err)
		}
	}
	return nil
}
