package fleet

import (
	"testing"
	"time"
)

// TestCertTimesReadOncePerCertificate: a listing reads the certificate times of a node whose
// current certificates it has not seen, and takes those of the last listing for the others; a
// renewed leaf (another DER or serial) is read again, and a node gone from the listing is
// forgotten.
func TestCertTimesReadOncePerCertificate(t *testing.T) {
	reads := map[string]int{}
	s := &bootCheckSamples{clock: SystemClock{}, times: func(d Device) (CertTimes, CertTimes) {
		reads[d.Name]++
		at := time.Unix(int64(len(d.Owned.Identity.LDevID.Chain[0])), 0)
		return CertTimes{NotAfter: at}, CertTimes{NotAfter: at.Add(time.Hour)}
	}}
	node := func(name, leaf, serial string) Device {
		d := Device{Name: name, Owned: Owned{State: StateActive, LDevIDSerial: serial, LAKSerial: "0a"}}
		d.Owned.Identity.LDevID.Chain = [][]byte{[]byte(leaf)}
		d.Owned.Identity.LAK.Chain = [][]byte{[]byte("lak of " + name)}
		return d
	}
	a, b := node("node-a", "leaf-a", "01"), node("node-b", "leaf-b", "02")
	s.observe([]Device{a, b})
	s.observe([]Device{a, b})
	if reads["node-a"] != 1 || reads["node-b"] != 1 {
		t.Fatalf("two listings of the same certificates read them %v times, want once each", reads)
	}
	if got := s.devices[0].ldevid.NotAfter; got != time.Unix(6, 0) {
		t.Errorf("node-a's LDevID NotAfter from the last listing's reading: %v, want %v", got, time.Unix(6, 0))
	}
	renewed := node("node-a", "renewed leaf-a", "03")
	s.observe([]Device{renewed, b})
	if reads["node-a"] != 2 || s.devices[0].ldevid.NotAfter != time.Unix(14, 0) {
		t.Errorf("a renewed LDevID: read %d times, NotAfter %v; want read again, its own NotAfter", reads["node-a"], s.devices[0].ldevid.NotAfter)
	}
	reserial := node("node-a", "renewed leaf-a", "04") // the same DER under another serial: not the current certificate
	s.observe([]Device{reserial})
	if reads["node-a"] != 3 {
		t.Errorf("the same leaf under another serial read %d times in all, want 3", reads["node-a"])
	}
	if len(s.certs) != 1 {
		t.Errorf("the listing of one node keeps %d certificate readings, want 1: node-b's is forgotten", len(s.certs))
	}
}
