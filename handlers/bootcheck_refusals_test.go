package handlers_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/attest"
	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/pki"
)

// bootRefusal is one refused boot check. setup alters NetBox or the request the node would send.
// A refusal before the device is identified (its current LAK and a quote over the nonce under
// it) leaves NetBox as it was; a failure after it is recorded once (wantFailed is the journal
// entry).
type bootRefusal struct {
	name       string
	setup      func(t *testing.T, req *api.BootCheckRequest)
	wantStatus int
	wantCode   string
	wantFailed string
}

// testBootCheckRefusals runs the refusals against node-a after its accepted checks.
func testBootCheckRefusals(t *testing.T, f *fleetdUnderTest, n node) {
	base := f.inv.Get(12)
	lakCert, err := x509.ParseCertificate(derChain(t, filepath.Join(n.dir, agent.FileLAKCert))[0])
	if err != nil {
		t.Fatal(err)
	}
	fleetCAs := newIssuer(t, f.cas[0], f.cas[1])
	otherCA, _, err := pki.NewCA(pki.NewCAConfig{Name: "another LAK CA", Lifetime: 24 * time.Hour, Rand: rand.Reader, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	otherCAs := newIssuer(t, otherCA, otherCA)
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(t *testing.T, i *pki.Issuer, device string, pub any) *pki.Certificate {
		c, err := i.IssueLAK(pki.Identity{DeviceName: device, HWSerialNum: []byte{1}}, pub)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	edit := func(id int64, change func(*fleet.Device)) {
		d := f.inv.Get(id)
		change(&d)
		f.inv.Set(d)
	}
	post := func(t *testing.T, req api.BootCheckRequest) (int, api.Error) {
		var e api.Error
		return postJSON(t, n.url+api.PathBootCheck, req, &e), e
	}
	rows := []bootRefusal{
		{name: "refuse/another device's LAK certificate (node-b's, quoted by node-a's AK)", wantStatus: 400, wantCode: "lak_mismatch",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				c := issue(t, fleetCAs, "node-b", otherKey.Public())
				b := base
				b.ID, b.Name, b.Owned.LAKSerial = 13, "node-b", c.SerialHex()
				b.Owned.Identity.Name = "node-b" // attested as node-b, as its LAK says
				f.inv.Set(b)
				req.LAKChain = c.DER()
			}},
		{name: "refuse/a LAK whose serial is no longer the device's (reprovisioned)", wantStatus: 403, wantCode: "lak_not_current",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				edit(12, func(d *fleet.Device) { d.Owned.LAKSerial = "00c0ffee" })
			}},
		{name: "refuse/a retired machine's old LAK", wantStatus: 403, wantCode: "lak_not_current",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				edit(12, func(d *fleet.Device) {
					d.Owned.State, d.Owned.LAKSerial, d.Owned.LDevIDSerial = fleet.StateRetired, "", ""
				})
			}},
		{name: "refuse/a replayed check (the same request twice)", wantStatus: 409, wantCode: "replayed",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				if status, e := post(t, *req); status != 200 {
					t.Fatalf("the first sending: %d %v", status, e)
				}
			}},
		{name: "refuse/a check made before the last accepted one", wantStatus: 409, wantCode: "replayed",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				if status, e := post(t, n.request(t)); status != 200 {
					t.Fatalf("the later check: %d %v", status, e)
				}
			}},
		{name: "refuse/a forged quote (one byte flipped)", wantStatus: 400, wantCode: "quote_invalid",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				flip(req.Platform.Quotes[len(req.Platform.Quotes)-1].Quote, 40)
			}},
		{name: "refuse/a forged quote signature", wantStatus: 400, wantCode: "quote_invalid",
			setup: func(t *testing.T, req *api.BootCheckRequest) { flip(req.Platform.Quotes[0].Signature, 20) }},
		{name: "refuse/a truncated quote", wantStatus: 400, wantCode: "quote_invalid",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				for i := range req.Platform.Quotes {
					q := &req.Platform.Quotes[i]
					q.Quote = q.Quote[:len(q.Quote)/2]
				}
			}},
		{name: "refuse/PCR values that are not the quoted ones", wantStatus: 400, wantCode: "quote_invalid",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				flip(req.Platform.PCRs[len(req.Platform.PCRs)-1].Digest, 0)
			}},
		{name: "refuse/a quote over another nonce than the token's", wantStatus: 400, wantCode: "quote_invalid",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				var other api.BootCheckNonce
				postJSON(t, n.url+api.PathBootCheckNonce, struct{}{}, &other)
				req.Token = other.Token
			}},
		{name: "refuse/a nonce token sealed by another fleetd", wantStatus: 400, wantCode: "nonce_invalid",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				key := make([]byte, attest.TokenKeySize)
				key[0] = 1 // the fleetd under test has the zero key
				s, err := attest.NewBootNonceSealer(attest.BootNonceConfig{TokenKey: key, Lifetime: time.Minute, Rand: rand.Reader, Now: time.Now})
				if err != nil {
					t.Fatal(err)
				}
				n, err := s.Issue()
				if err != nil {
					t.Fatal(err)
				}
				req.Token = n.Token
			}},
		{name: "refuse/a certificate from another CA (same key, name and recorded serial)", wantStatus: 400, wantCode: "lak_untrusted",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				c := issue(t, otherCAs, "node-a", lakCert.PublicKey)
				edit(12, func(d *fleet.Device) { d.Owned.LAKSerial = c.SerialHex() })
				req.LAKChain = c.DER()
			}},
		{name: "refuse/the LDevID certificate presented as the LAK", wantStatus: 400, wantCode: "lak_untrusted",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				req.LAKChain = derChain(t, filepath.Join(n.dir, agent.FileLDevIDCert))
				edit(12, func(d *fleet.Device) { d.Owned.LAKSerial = d.Owned.LDevIDSerial })
			}},
		{name: "refuse/a LAK naming a device NetBox does not have", wantStatus: 404, wantCode: "unknown_device",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				req.LAKChain = issue(t, fleetCAs, "ghost", lakCert.PublicKey).DER()
			}},
		{name: "refuse/a LAK naming a device renamed since its last check", wantStatus: 404, wantCode: "unknown_device",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				edit(12, func(d *fleet.Device) { d.Name = "node-a-renamed" }) // fleetd read node-a by its id at the last check
			}},
		{name: "refuse/a decommissioning device", wantStatus: 409, wantCode: "not_active",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				edit(12, func(d *fleet.Device) { d.Status = fleet.StatusDecommissioning })
			}},
		{name: "refuse/a device with a request running", wantStatus: 409, wantCode: "not_active",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				edit(12, func(d *fleet.Device) { d.Owned.State = fleet.StatePending })
			}},
		// The checks before these rows cached node-a's boot: another log is replayed, and refused.
		{name: "refuse/an event log that does not replay: recorded as failed", wantStatus: 400, wantCode: "eventlog_invalid",
			wantFailed: "danger: Boot check of node-a failed (eventlog_invalid): the event log does not replay to the quoted SHA-256 PCRs",
			setup: func(t *testing.T, req *api.BootCheckRequest) {
				req.Platform.EventLog = eventlogs.Ubuntu2104NoSecureBoot
			}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			f.inv.Set(base)
			req := n.request(t)
			r.setup(t, &req)
			before, beforeB, journal := f.inv.Get(12), f.inv.Get(13), len(f.inv.JournalOf(12))
			status, e := post(t, req)
			if status != r.wantStatus || e.Code != r.wantCode || e.Message == "" {
				t.Fatalf("answer %d %q (%s), want %d %q", status, e.Code, e.Message, r.wantStatus, r.wantCode)
			}
			if r.wantFailed == "" {
				if diff := cmp.Diff(before, f.inv.Get(12), cmpDevice); diff != "" {
					t.Errorf("a refusal before the device was identified changed it (-before +after):\n%s", diff)
				}
				if diff := cmp.Diff(beforeB, f.inv.Get(13), cmpDevice); diff != "" {
					t.Errorf("node-b changed (-before +after):\n%s", diff)
				}
				if j := f.inv.JournalOf(12); len(j) != journal {
					t.Errorf("journal entries written: %q", j[journal:])
				}
				return
			}
			checkRecordedFailure(t, f, before, journal, r.wantFailed, func() (int, api.Error) { return post(t, req) }, func() (int, api.Error) { return post(t, n.request(t)) })
		})
	}
}

// testBootCheckConflicts changes the device in NetBox between fleetd's read and its conditional
// write (412): the check is decided again on the device as it is now, at most six times (as
// every conditional write: fleet.UpdateIfMatch).
func testBootCheckConflicts(t *testing.T, f *fleetdUnderTest, n node) {
	base := f.inv.Get(12)
	t.Run("refuse/another writer before every write: decided six times, then a 5xx the node retries, nothing recorded", func(t *testing.T) {
		f.inv.Set(base)
		req := n.request(t)
		writes := 0
		var other func(d *fleet.Device)
		other = func(d *fleet.Device) { // runs under the inventory's lock, before each conditional write
			writes++
			d.Serial = fmt.Sprintf("SN-%d", writes)
			f.inv.ConflictOnce[12] = other
		}
		f.inv.ConflictOnce[12] = other
		var e api.Error
		status := postJSON(t, n.url+api.PathBootCheck, req, &e)
		f.inv.Set(f.inv.Get(12)) // takes the inventory's lock: the last write is over
		delete(f.inv.ConflictOnce, 12)
		if status < 500 || writes != 6 {
			t.Fatalf("answer %d %v after %d writes, want a 5xx after 6", status, e, writes)
		}
		if d := f.inv.Get(12); !d.Owned.LastBootCheck.Equal(base.Owned.LastBootCheck) {
			t.Errorf("last_boot_check %v, want %v kept: nothing of the check recorded", d.Owned.LastBootCheck, base.Owned.LastBootCheck)
		}
	})
	t.Run("refuse/the owner decommissions the device during the check", func(t *testing.T) {
		f.inv.Set(base)
		req := n.request(t)
		f.inv.ConflictOnce[12] = func(d *fleet.Device) { d.Status = fleet.StatusDecommissioning }
		var e api.Error
		if status := postJSON(t, n.url+api.PathBootCheck, req, &e); status != 409 || e.Code != "not_active" {
			t.Fatalf("answer %d %v, want 409 not_active", status, e)
		}
		if d := f.inv.Get(12); d.Status != fleet.StatusDecommissioning || !d.Owned.LastBootCheck.Equal(base.Owned.LastBootCheck) {
			t.Errorf("status %q, last_boot_check %v (want the owner's change only)", d.Status, d.Owned.LastBootCheck)
		}
	})
	t.Run("ok/an unrelated change during the check is retried: one more read and one more write", func(t *testing.T) {
		f.inv.Set(base)
		var res api.BootCheckResponse
		calls := f.inv.Calls.Load()
		if status := postJSON(t, n.url+api.PathBootCheck, n.request(t), &res); status != 200 || res.Outcome != "ok" {
			t.Fatalf("a check without a conflict: %d %+v, want 200 ok", status, res)
		}
		plain := f.inv.Calls.Load() - calls
		f.inv.Set(base)
		req := n.request(t)
		f.inv.ConflictOnce[12] = func(d *fleet.Device) { d.Serial = "SN-2" }
		calls = f.inv.Calls.Load()
		if status := postJSON(t, n.url+api.PathBootCheck, req, &res); status != 200 || res.Outcome != "ok" {
			t.Fatalf("answer %d %+v, want 200 ok", status, res)
		}
		// A read is two requests since the seal: the device and its change log.
		if got := f.inv.Calls.Load() - calls; got != plain+3 {
			t.Errorf("the retried check made %d NetBox requests, want %d: the check without a conflict's %d, and a read (the device and its change log) and a write more", got, plain+3, plain)
		}
		if d := f.inv.Get(12); d.Serial != "SN-2" || !d.Owned.LastBootCheck.Equal(res.CheckedAt) {
			t.Errorf("serial %q, last_boot_check %v (want both the owner's change and the check, %v)", d.Serial, d.Owned.LastBootCheck, res.CheckedAt)
		}
	})
}

// checkRecordedFailure checks a failure recorded once: boot_check failed, last_boot_check kept,
// one journal entry; the same failure again writes no second entry; a good check then passes
// again with its own entry.
func checkRecordedFailure(t *testing.T, f *fleetdUnderTest, before fleet.Device, journal int, want string, again, good func() (int, api.Error)) {
	t.Helper()
	d := f.inv.Get(12)
	if d.Owned.BootCheck != fleet.BootCheckFailed || !d.Owned.LastBootCheck.Equal(before.Owned.LastBootCheck) || d.Owned.BootBaseline != before.Owned.BootBaseline {
		t.Errorf("boot_check %q (want failed), last_boot_check %v (want %v kept), baseline kept %v",
			d.Owned.BootCheck, d.Owned.LastBootCheck, before.Owned.LastBootCheck, d.Owned.BootBaseline == before.Owned.BootBaseline)
	}
	j := f.inv.JournalOf(12)
	if len(j) != journal+1 || !strings.HasPrefix(j[journal], want) {
		t.Fatalf("journal %q, want one entry starting %q", j[journal:], want)
	}
	if status, e := again(); status != 400 || len(f.inv.JournalOf(12)) != journal+1 {
		t.Errorf("the same failure again: %d %v, journal %q (want no second entry)", status, e, f.inv.JournalOf(12)[journal:])
	}
	if status, e := good(); status != 200 {
		t.Fatalf("a good check after the failure: %d %v", status, e)
	}
	j = f.inv.JournalOf(12)
	if len(j) != journal+2 || !strings.HasPrefix(j[journal+1], "success: Boot check of node-a passed again after failed") {
		t.Errorf("journal after the good check: %q", j[journal+1:])
	}
}

var cmpDevice = cmpopts.EquateComparable(netip.Prefix{})

func flip(b []byte, i int) { b[i%len(b)] ^= 0x01 }
