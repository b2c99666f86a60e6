package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"github.com/folly-infra/fleetd/netbox/layout"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	ga "github.com/google/go-attestation/attest"

	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/netbox"
	"github.com/folly-infra/fleetd/pki"
)

// TestBodyCapFitsNetBoxsLargestDelivery sizes MaxBody from what NetBox sends: a device update
// carries the device three times (data, and both snapshots; reference: NetBox 4.6.8
// netbox/extras/webhooks.py), each with every custom field, and the largest device is one whose
// fields fleetd filled to their caps — fleet_facts with 64 disks of the longest serial and path
// fleetd keeps, fleet_identity with real LDevID and LAK chains (an RSA-2048 LAK) and key blobs of
// a TPM's largest, the largest recorded boot's baseline, a 512-byte fleet_message. fleetd writes
// them through its own NetBox client into the emulator, which renders and signs its deliveries as
// NetBox does; the owner's next save (desired_action) sends them. The cap must be at least twice
// the largest delivery, and refuses a body over it.
func TestBodyCapFitsNetBoxsLargestDelivery(t *testing.T) {
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	defer rcv.Close()
	emu, err := netboxemu.Start(netboxemu.Config{DeliveryTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	raw, err := os.ReadFile("../netbox-webhooks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := emu.LoadSchema(raw, rcv.URL, secret); err != nil {
		t.Fatal(err)
	}
	fleetdToken, err := emu.AddToken(netboxemu.TokenSpec{User: "fleetd"})
	if err != nil {
		t.Fatal(err)
	}
	ownerToken, err := emu.AddToken(netboxemu.TokenSpec{User: "owner", Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	id, err := emu.AddDevice(netboxemu.DeviceSpec{Name: strings.Repeat("n", 64), Serial: strings.Repeat("S", 50), Status: "active",
		PrimaryIPv4: "10.0.0.21/24", Interfaces: []netboxemu.InterfaceSpec{{Name: "eth0", MACs: []string{"aa:bb:cc:00:11:22"}}},
		CustomFields: map[string]any{"fleet_class": "talos-worker", "disk_serial": strings.Repeat("D", 128), "tpm": "2.0",
			"ek_sha256": strings.Repeat("ab", 32)}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := netbox.New(netbox.Config{URL: emu.URL(), Token: fleetdToken})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Update(context.Background(), id, largestOwned(t)); err != nil {
		t.Fatalf("fleetd's write: %v", err)
	}
	req, _ := http.NewRequest("PATCH", emu.URL()+"/api/dcim/devices/"+strconv.FormatInt(id, 10)+"/", strings.NewReader(`{"custom_fields": {"desired_action": "attest"}}`))
	req.Header.Set("Authorization", "Token "+ownerToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the owner's save: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := emu.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	largest := 0
	for _, d := range emu.Deliveries() {
		largest = max(largest, len(d.Body))
	}
	t.Logf("NetBox's largest delivery: %d bytes (%.1f KiB); MaxBody %d KiB (%.1fx)", largest, float64(largest)/1024, MaxBody>>10, float64(MaxBody)/float64(largest))
	if largest == 0 {
		t.Fatal("NetBox delivered nothing")
	}
	if 2*largest > MaxBody {
		t.Errorf("NetBox's largest delivery is %d bytes: MaxBody (%d) is less than twice it", largest, MaxBody)
	}
}

// largestOwned is a write of every field fleetd owns at the largest it writes it.
func largestOwned(t *testing.T) fleet.Patch {
	t.Helper()
	now := time.Now()
	ca := func(name string) *pki.CA {
		c, _, err := pki.NewCA(pki.NewCAConfig{Name: name, Rand: rand.Reader, Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ca("fleetd LDevID"), LAK: ca("fleetd LAK"), LDevIDLifetime: time.Hour, LAKLifetime: time.Hour,
		Rand: rand.Reader, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	who := pki.Identity{DeviceName: strings.Repeat("n", 64), DeviceSerial: strings.Repeat("S", 50), HWSerialNum: bytes.Repeat([]byte{7}, 32)}
	ldevidKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	lakKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ldevid, err := iss.IssueLDevID(who, ldevidKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	lak, err := iss.IssueLAK(who, lakKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	var baseline string
	for _, log := range [][]byte{eventlogs.RHEL8SecureBoot, eventlogs.COS85SecureBoot, eventlogs.Ubuntu2104NoSecureBoot, eventlogs.Ubuntu2104NoDBX} {
		el, err := ga.ParseEventLog(log)
		if err != nil {
			t.Fatal(err)
		}
		events := slices.DeleteFunc(el.Events(ga.HashSHA256), func(e ga.Event) bool { return e.Type == 0x03 })
		if b := attest.NewBaseline(events).String(); len(b) > len(baseline) {
			baseline = b
		}
	}
	var disks []layout.FactDisk
	for range layout.MaxFactDisks {
		disks = append(disks, layout.FactDisk{Serial: strings.Repeat("s", layout.MaxFactText), Path: "/dev/disk/by-id/" + strings.Repeat("p", layout.MaxFactPath-16)})
	}
	hex64 := strings.Repeat("0f", 32)
	facts := layout.Facts{Version: layout.FactsVersion,
		Proved: layout.ProvedFacts{EKSHA256: hex64, EKIssuer: "CN=" + strings.Repeat("i", 200), TPMManufacturer: "00001014",
			TPMVersion: "2.0 level 0 revision 1.64", BootState: hex64, BootPolicy: strings.Repeat("b", 128),
			Learned: layout.Learned{Since: now, Source: layout.FactsFromEnrollment}},
		Claimed: layout.ClaimedFacts{SMBIOSUUIDSHA256: hex64, Disks: disks, DisksFound: 1000, MAC: "aa:bb:cc:00:11:22",
			Learned: layout.Learned{Since: now, Source: layout.FactsFromBootCheck}}}
	identity := fleet.IdentityMaterial{Version: fleet.IdentityVersion, Request: "provision-k3f9x2mq", Issued: now, Expires: now.Add(4 * time.Hour),
		UUIDSHA256: hex64, SMBIOSSerial: strings.Repeat("S", 64), FetchSecretSHA256: hex64, EKSHA256: hex64,
		// A TPM2B_PUBLIC of an RSA-2048 key is about 280 bytes and its wrapped private part about
		// 220: 1 KiB and 512 bytes are a TPM's largest.
		LAK:    fleet.LAKMaterial{Chain: lak.DER(), Blob: bytes.Repeat([]byte{1}, 1024)},
		LDevID: fleet.LDevIDMaterial{Chain: ldevid.DER(), Public: bytes.Repeat([]byte{2}, 512), Private: bytes.Repeat([]byte{3}, 512)}}
	state, check := fleet.StateActive, fleet.BootCheckOK
	msg := strings.Repeat("m", fleet.MaxMessage)
	req, wf, serial := "provision-k3f9x2mq", strings.Repeat("w", 80), strings.Repeat("a", 40)
	return fleet.Patch{State: &state, Message: &msg, Request: &req, Workflow: &wf, LDevIDSerial: &serial, LAKSerial: &serial,
		LDevIDSerialPrevious: &serial, LAKSerialPrevious: &serial, BootBaseline: &baseline, LastBootCheck: &now, BootCheck: &check,
		Identity: &identity, Facts: &facts}
}
