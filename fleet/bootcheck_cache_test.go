package fleet

import "testing"

// TestNameIndexIsBounded: the boot check's index of device names holds at most its bound; a new
// name in a full index takes one other name's place, a name already held takes none, and below
// the bound nothing is forgotten.
func TestNameIndexIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		puts []string
		want int // names held
		held []string
	}{
		{"ok/below the bound every name is held", []string{"node-a", "node-b"}, 2, []string{"node-a", "node-b"}},
		{"ok/a name put again is one name", []string{"node-a", "node-a"}, 1, []string{"node-a"}},
		{"ok/a name held, put again in a full index, forgets none", []string{"node-a", "node-b", "node-c", "node-c"}, 3, []string{"node-a", "node-b", "node-c"}},
		{"ok/a fourth name in an index of three takes one other name's place", []string{"node-a", "node-b", "node-c", "node-d"}, 3, []string{"node-d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newNameIndex(3)
			for i, n := range tc.puts {
				x.put(n, int64(i+1))
			}
			if len(x.ids) != tc.want {
				t.Errorf("%d names held, want %d: %v", len(x.ids), tc.want, x.ids)
			}
			for _, n := range tc.held {
				if _, ok := x.get(n); !ok {
					t.Errorf("%s not held: %v", n, x.ids)
				}
			}
		})
	}
}
