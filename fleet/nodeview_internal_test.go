package fleet

import "testing"

// viewDevice is a device in good standing, or refused when failed is set.
func viewDevice(id int64, name string, failed bool) Device {
	d := Device{ID: id, Name: name, Trust: Trust{Verdict: VerdictTrusted}, Owned: Owned{State: StateActive, Request: "provision-aaaaaaaa", BootCheck: BootCheckOK}}
	if failed {
		d.Owned.BootCheck = BootCheckFailed
	}
	return d
}

func refusedIn(v *nodeView, name string) (known, refused bool) {
	devices, r, _ := v.lookup(name)
	return len(devices) > 0, r.Code != ""
}

// The view against the races between a listing and the single observations made while it ran:
// what was observed, tightened or found deleted after a listing began survives that listing; a
// listing that began before the one applied changes nothing; a read never lifts a refusal.
func TestNodeViewOrdering(t *testing.T) {
	v := newNodeView()
	v.replace([]Device{viewDevice(1, "a", false), viewDevice(2, "b", false), viewDevice(3, "c", false)}, v.begin())

	older := v.begin()                  // a listing that read every device in good standing, applied late
	v.observe(viewDevice(1, "a", true)) // this instance's write: a refused
	v.forget(2)                         // a read found b deleted
	newer := v.begin()
	v.replace([]Device{viewDevice(1, "a", false), viewDevice(2, "b", false), viewDevice(3, "c", true)}, older)
	if _, refused := refusedIn(v, "a"); !refused {
		t.Error("a listing begun before this instance's write undid it")
	}
	if known, _ := refusedIn(v, "b"); known {
		t.Error("a listing begun before a read found b deleted brought it back")
	}
	if _, refused := refusedIn(v, "c"); !refused {
		t.Error("c: the listing's own news was not applied")
	}
	v.replace([]Device{viewDevice(1, "a", true), viewDevice(3, "c", true)}, newer)
	v.replace([]Device{viewDevice(1, "a", false), viewDevice(2, "b", false), viewDevice(3, "c", false)}, older)
	if _, refused := refusedIn(v, "c"); !refused {
		t.Error("an older listing applied after a newer one changed the view")
	}
	if known, _ := refusedIn(v, "b"); known {
		t.Error("an older listing applied after a newer one brought b back")
	}
	v.tighten(viewDevice(3, "c", false))
	if _, refused := refusedIn(v, "c"); !refused {
		t.Error("a read in good standing lifted a refusal")
	}
	v.tighten(viewDevice(1, "a", true))
	v.observe(viewDevice(1, "a", false))
	if _, refused := refusedIn(v, "a"); refused {
		t.Error("this instance's write in good standing did not lift the refusal")
	}
}
