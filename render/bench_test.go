package render_test

import (
	"testing"

	"github.com/folly-infra/fleetd/fleet"
)

// BenchmarkRender is what a configuration fetch spends rendering, per class kind: since delivery
// is stateless (docs/design.md §9) every fetch that may be served renders its configuration from
// NetBox's fields and spore's files, and a Talos config is also validated as Talos in metal mode
// would (a config the OS would reject is never served). BenchmarkConfigFetch (handlers) is the
// whole fetch over HTTP.
func BenchmarkRender(b *testing.B) {
	r := newTestRenderer(b, nil)
	d := renderDevice("node-a", "3c:ec:ef:4c:4f:54", "10.0.0.5/24", "S123")
	for _, c := range []fleet.Class{talosWorker, talosCP, nixosClass, alpineClass, nocloudClass} {
		b.Run(c.Name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Render(d, c, renderID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
