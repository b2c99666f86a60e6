package fleet

import (
	"bytes"
	"os"
	"testing"
)

// FuzzLoadCatalog: classes.json never panics the loader, and whatever it accepts is usable: every
// installable class names a Template for every action, has an image and a positive timeout.
func FuzzLoadCatalog(f *testing.F) {
	if b, err := os.ReadFile("../examples/classes.json"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"classes": {"a": {"kind": "talos", "installable": false, "reason": "r"}}}`))
	f.Add([]byte(`{"classes": {"a": {"kind": "nixos-image", "profile": "p", "image": "i", "templates": {"provision": "p", "attest": "a", "wipe": "w", "retire": "r"}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cat, err := LoadCatalog(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, n := range cat.Names() {
			c, _ := cat.Class(n)
			if !c.Installable {
				continue
			}
			for _, a := range Actions {
				if c.Templates[a] == "" {
					t.Fatalf("class %s accepted without a Template for %s", n, a)
				}
			}
			if c.Image == "" || c.Timeout <= 0 {
				t.Fatalf("class %s accepted without an image or timeout: %+v", n, c)
			}
			if c.Kind == KindTalos && c.Talos == nil || c.Kind == KindCloudInit && c.CloudInit == nil {
				t.Fatalf("class %s accepted without its kind's block", n)
			}
		}
	})
}
