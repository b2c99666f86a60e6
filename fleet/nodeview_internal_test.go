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
// listing that began before the one applied changes nothing; a read lifts no refusal that a
// listing has not put in doubt.
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
	v.judged(viewDevice(3, "c", false), v.begin())
	if _, refused := refusedIn(v, "c"); !refused {
		t.Error("a read in good standing lifted a refusal")
	}
	v.judged(viewDevice(1, "a", true), v.begin())
	v.observe(viewDevice(1, "a", false))
	if _, refused := refusedIn(v, "a"); refused {
		t.Error("this instance's write in good standing did not lift the refusal")
	}
}

// vouched is d as a read with its change log found it, fleetd's user its last writer.
func vouched(d Device) Device {
	d.Trust.Logged = true
	return d
}

// The view against a replay (docs/design.md §9, "Sealed fields"): a listing, judged on seals only,
// never lifts a refusal; it marks the entry loosening, and only a read with the change log begun
// after what set the refusal, or this instance's write, lifts it.
func TestNodeViewLoosening(t *testing.T) {
	v := newNodeView()
	v.replace([]Device{viewDevice(1, "a", true), viewDevice(2, "b", false)}, v.begin())
	beforeListing := v.begin() // a read that began before the listing that found b refused and a in good standing
	v.replace([]Device{viewDevice(1, "a", false), viewDevice(2, "b", true), viewDevice(3, "c", true)}, v.begin())
	if _, refused := refusedIn(v, "a"); !refused || !v.loosening(1) {
		t.Fatalf("a listing in good standing lifted a's refusal (refused %v, loosening %v)", refused, v.loosening(1))
	}
	if _, refused := refusedIn(v, "b"); !refused || v.loosening(2) {
		t.Error("a listing did not make b refuse")
	}
	if known, refused := refusedIn(v, "c"); !known || !refused {
		t.Error("a listing did not add c, refused")
	}

	v.judged(viewDevice(1, "a", false), v.begin())
	if _, refused := refusedIn(v, "a"); !refused {
		t.Error("a read without the change log (a seal alone, which a replay passes) lifted the refusal")
	}
	v.judged(vouched(viewDevice(1, "a", false)), beforeListing)
	if _, refused := refusedIn(v, "a"); !refused {
		t.Error("a read begun before the listing that put a's refusal in doubt lifted it")
	}
	v.replace([]Device{viewDevice(1, "a", false), viewDevice(2, "b", false), viewDevice(3, "c", true)}, v.begin())
	v.judged(vouched(viewDevice(2, "b", false)), beforeListing)
	if _, refused := refusedIn(v, "b"); !refused {
		t.Error("a read begun before the listing that found b refused lifted that refusal")
	}

	early := v.begin() // a listing that began before the read below
	read := v.begin()
	late := v.begin() // a listing that began while the read below ran
	v.judged(vouched(viewDevice(1, "a", false)), read)
	if _, refused := refusedIn(v, "a"); refused || v.loosening(1) {
		t.Fatal("a read with the change log, begun after the refusal, did not lift it")
	}
	v.replace([]Device{viewDevice(1, "a", true), viewDevice(2, "b", false), viewDevice(3, "c", true)}, early)
	if _, refused := refusedIn(v, "a"); refused {
		t.Error("a listing begun before the read that lifted a's refusal undid it")
	}
	v.replace([]Device{viewDevice(1, "a", true), viewDevice(2, "b", false), viewDevice(3, "c", true)}, late)
	if _, refused := refusedIn(v, "a"); !refused {
		t.Error("a listing begun after the read that lifted a's refusal, and finding a refused, was not applied")
	}

	v.judged(vouched(viewDevice(3, "c", false)), v.begin())
	if _, refused := refusedIn(v, "c"); !refused {
		t.Error("a read lifted a refusal no listing had put in doubt")
	}
	v.observe(viewDevice(2, "b", false))
	if _, refused := refusedIn(v, "b"); refused || v.loosening(2) {
		t.Error("this instance's write in good standing did not lift b's loosening refusal")
	}
}
