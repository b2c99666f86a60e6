package fleet

import (
	"testing"
	"time"
)

// TestDeviceLocks: one device's work runs one at a time, and the lock of a device no one holds
// or waits for is forgotten (a fleet of 10,000 devices does not keep 10,000 locks).
func TestDeviceLocks(t *testing.T) {
	var l deviceLocks
	held := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.locks)
	}
	l.lock(1)()
	if n := held(); n != 0 {
		t.Errorf("ok/a lock taken and released: %d locks kept, want 0", n)
	}

	unlockA := l.lock(1)
	other := l.lock(2) // another device's lock is not this one
	got := make(chan func())
	go func() { got <- l.lock(1) }()
	select {
	case <-got:
		t.Fatal("refuse/a second holder of device 1's lock while the first holds it")
	case <-time.After(50 * time.Millisecond):
	}
	other()
	unlockA()
	unlockB := <-got
	if n := held(); n != 1 {
		t.Errorf("ok/device 1's lock, held by its second taker: %d locks kept, want 1", n)
	}
	unlockB()
	if n := held(); n != 0 {
		t.Errorf("ok/every lock released: %d locks kept, want 0", n)
	}
}
