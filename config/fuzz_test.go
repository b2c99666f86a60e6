package config

import (
	"os"
	"strings"
	"testing"
)

// FuzzParse: no config text panics the parser, and an accepted config has its defaults applied.
func FuzzParse(f *testing.F) {
	dir, good := validConfigDir(f)
	f.Add(good)
	if b, err := os.ReadFile("../examples/fleetd.yaml"); err == nil {
		f.Add(string(b))
	}
	f.Add("listen: [1, 2]\n")
	f.Add("reconcile: {interval: -5s}\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := Parse(strings.NewReader(text), dir)
		if err != nil {
			return
		}
		if c.Reconcile.Interval.D() <= 0 || c.Delivery.PendingTTL.D() <= 0 || c.Kubernetes.Namespace == "" {
			t.Fatalf("accepted a config without its defaults: %+v", c)
		}
	})
}
