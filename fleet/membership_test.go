package fleet_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	mrand "math/rand"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// csrSpec is what a CSR's PEM asks for.
type csrSpec struct {
	cn     string
	orgs   []string
	dns    []string
	ips    []net.IP
	emails []string
	uris   []*url.URL
}

// csrPEM is a real PKCS#10 request of spec, signed by a fresh P-256 key (as the kubelet makes).
func csrPEM(t *testing.T, spec csrSpec) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: spec.cn, Organization: spec.orgs},
		DNSNames: spec.dns, IPAddresses: spec.ips, EmailAddresses: spec.emails, URIs: spec.uris,
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// membershipFleet is the approver's fleet: node-a and node-b joining with their own tokens,
// node-c declared and never attested, node-o active from before fleetd approved CSRs.
func membershipFleet() []fleet.Device {
	joining := func(id int64, name, addr, req string) fleet.Device {
		d := fleettest.Declared(id, name)
		d.Address = netip.MustParsePrefix(addr)
		d.Declared.Class = "talos-member"
		d.Status = fleet.StatusActive
		d.Owned = fleet.Owned{State: fleet.StateJoining, Request: req, Workflow: name + "-" + req, LAKSerial: "0a", LDevIDSerial: "0b"}
		return fleettest.Attested(d, attestedUUID, testEpoch, time.Hour)
	}
	c := fleettest.Declared(14, "node-c")
	o := fleettest.Declared(17, "node-o")
	o.Status, o.Address = fleet.StatusActive, netip.MustParsePrefix("10.0.0.9/24")
	o.Owned = fleet.Owned{State: fleet.StateActive, Request: "provision-oooooooo", LAKSerial: "0c", LDevIDSerial: "0d"}
	return []fleet.Device{joining(12, "node-a", "10.0.0.5/24", "provision-aaaaaaaa"), joining(13, "node-b", "10.0.0.6/24", "provision-bbbbbbbb"), c, o}
}

func tokenOf(t *testing.T, id int64, req string) fleet.BootstrapToken {
	t.Helper()
	tok, err := fleettest.SealKeys().BootstrapToken(fleettest.SealKey().ID, id, req)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type approverFixture struct {
	clock   *fleettest.Clock
	s       *fleet.Service
	nb      *fleettest.NetBox
	cluster *fleettest.Cluster
	reg     *prometheus.Registry
}

func newApproverFixture(t *testing.T) approverFixture {
	t.Helper()
	nb, cl, reg := fleettest.NewNetBox(membershipFleet()...), fleettest.NewCluster(), prometheus.NewRegistry()
	clock := fleettest.NewClock(testEpoch.Add(10 * time.Minute))
	nb.Clock = clock
	s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ConfigTTL: time.Hour, ServiceUser: fleettest.ServiceUser},
		fleet.Deps{Seal: fleettest.SealKeys(), NetBox: nb, Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(), Clock: clock,
			Renderer: sharedRenderer(), Random: mrand.New(mrand.NewSource(1)), Cluster: cl, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return approverFixture{clock: clock, s: s, nb: nb, cluster: cl, reg: reg}
}

// TestReviewCSR is the approver's specification: real x509 requests, each row one CSR and the
// decision written on it. Every decided CSR carries its decision (none left pending); an
// approval by a bootstrap token is recorded, sealed, on the device before it is written, and
// uses the token up.
func TestReviewCSR(t *testing.T) {
	a := tokenOf(t, 12, "provision-aaaaaaaa")
	b := tokenOf(t, 13, "provision-bbbbbbbb")
	client := []string{"digital signature", "client auth"}
	serving := []string{"digital signature", "key encipherment", "server auth"}
	nodes := []string{"system:nodes"}
	nodeA := csrSpec{cn: "system:node:node-a", orgs: nodes}
	type row struct {
		name     string
		prep     func(f approverFixture)
		signer   string
		username string
		usages   []string
		spec     csrSpec
		raw      []byte // spec.request as given, instead of one made from spec
		approve  bool
		reason   string
		check    func(t *testing.T, f approverFixture)
	}
	recorded := func(t *testing.T, f approverFixture) {
		got := f.nb.Get(12).Owned.Identity.KubeletClient
		if got == nil || got.Name != "csr-1" || got.UID != "uid-csr-1" {
			t.Errorf("node-a's identity records %+v, want the approval of csr-1", got)
		}
		if _, left := f.cluster.Tokens[a.ID]; left || len(f.cluster.Deleted) != 1 || f.cluster.Deleted[0] != a.ID {
			t.Errorf("token Secrets deleted %v, want only node-a's %s", f.cluster.Deleted, a.ID)
		}
	}
	nothingRecorded := func(t *testing.T, f approverFixture) {
		if got := f.nb.Get(12).Owned.Identity.KubeletClient; got != nil {
			t.Errorf("node-a's identity records %+v after a denial", got)
		}
		if len(f.cluster.Deleted) != 0 {
			t.Errorf("token Secrets deleted %v after a denial", f.cluster.Deleted)
		}
	}
	usedOnce := func(f approverFixture) {
		f.nb.Set(func() fleet.Device {
			d := f.nb.Get(12)
			d.Owned.Identity.KubeletClient = &fleet.ApprovedCSR{Name: "csr-0", UID: "uid-csr-0", Approved: testEpoch}
			return d
		}())
	}
	active := func(edit func(d *fleet.Device)) func(f approverFixture) {
		return func(f approverFixture) {
			d := f.nb.Get(12)
			d.Owned.State = fleet.StateActive
			d.Owned.Identity.KubeletClient = &fleet.ApprovedCSR{Name: "csr-0", UID: "uid-csr-0", Approved: testEpoch}
			if edit != nil {
				edit(&d)
			}
			f.nb.Set(d)
		}
	}
	// swapped: node-a's machine failed its boot check; an editor renames its device away and
	// gives node-a's name to node-b's device, active and in good standing.
	swapped := func(f approverFixture) {
		active(func(d *fleet.Device) { d.Owned.BootCheck = fleet.BootCheckFailed })(f)
		b := f.nb.Get(13)
		b.Owned.State = fleet.StateActive
		b.Owned.Identity.KubeletClient = &fleet.ApprovedCSR{Name: "csr-0", UID: "uid-csr-0", Approved: testEpoch}
		f.nb.Set(b)
		renamed(f.nb, 12, "node-a-old")
		renamed(f.nb, 13, "node-a")
	}
	saysRenamed := func(t *testing.T, f approverFixture) {
		dec, _ := f.cluster.Decision("csr-1")
		if !strings.Contains(dec.Message, "renamed since") || !strings.Contains(dec.Message, "provision the device again") {
			t.Errorf("the denial says %q: want that the device was renamed since its attestation, and what to do", dec.Message)
		}
	}
	rows := []row{
		// The first client certificate: the device's own token, for its own name, once.
		{name: "ok/node-a's own token for node-a", signer: fleet.SignerKubeletClient, username: a.Username(), usages: client, spec: nodeA,
			approve: true, reason: "AttestedDevice", check: recorded},
		{name: "ok/with key encipherment, as for an RSA key", signer: fleet.SignerKubeletClient, username: a.Username(),
			usages: []string{"key encipherment", "digital signature", "client auth"}, spec: nodeA, approve: true, reason: "AttestedDevice", check: recorded},
		{name: "ok/the approved CSR offered again", prep: func(f approverFixture) {
			d := f.nb.Get(12)
			d.Owned.Identity.KubeletClient = &fleet.ApprovedCSR{Name: "csr-1", UID: "uid-csr-1", Approved: testEpoch}
			f.nb.Set(d)
		}, signer: fleet.SignerKubeletClient, username: a.Username(), usages: client, spec: nodeA, approve: true, reason: "AttestedDevice"},
		{name: "refuse/node-b's token for node-a's name", signer: fleet.SignerKubeletClient, username: b.Username(), usages: client, spec: nodeA,
			reason: "TokenNotTheDevices", check: nothingRecorded},
		{name: "refuse/node-a's token a second time", prep: usedOnce, signer: fleet.SignerKubeletClient, username: a.Username(), usages: client, spec: nodeA,
			reason: "TokenAlreadyUsed"},
		{name: "refuse/a token that is no device's", signer: fleet.SignerKubeletClient, username: "system:bootstrap:abcdef", usages: client, spec: nodeA,
			reason: "TokenNotTheDevices", check: nothingRecorded},
		{name: "refuse/a CSR naming a machine that never attested", signer: fleet.SignerKubeletClient, username: a.Username(), usages: client,
			spec: csrSpec{cn: "system:node:node-c", orgs: nodes}, reason: "TokenNotTheDevices", check: nothingRecorded},
		{name: "refuse/the never-attested machine renewing", signer: fleet.SignerKubeletClient, username: "system:node:node-c", usages: client,
			spec: csrSpec{cn: "system:node:node-c", orgs: nodes}, reason: "DeviceFailsItsChecks"},
		{name: "refuse/a name NetBox does not have", signer: fleet.SignerKubeletClient, username: a.Username(), usages: client,
			spec: csrSpec{cn: "system:node:node-z", orgs: nodes}, reason: "UnknownDevice"},
		{name: "refuse/the token once the device is active", prep: active(func(d *fleet.Device) { d.Owned.Identity.KubeletClient = nil }),
			signer: fleet.SignerKubeletClient, username: a.Username(), usages: client, spec: nodeA, reason: "DeviceNotJoining"},
		{name: "refuse/the token with a wipe asked", prep: func(f approverFixture) {
			f.nb.WriteAs(fleettest.Owner, 12, func(d *fleet.Device) { d.Declared.DesiredAction = fleet.ActionWipe })
		}, signer: fleet.SignerKubeletClient, username: a.Username(), usages: client, spec: nodeA, reason: "DeviceFailsItsChecks", check: nothingRecorded},

		// What a kubelet client certificate is.
		{name: "refuse/an extra organization", signer: fleet.SignerKubeletClient, username: a.Username(), usages: client,
			spec: csrSpec{cn: "system:node:node-a", orgs: []string{"system:nodes", "system:masters"}}, reason: "WrongOrganization", check: nothingRecorded},
		{name: "refuse/no organization", signer: fleet.SignerKubeletClient, username: a.Username(), usages: client,
			spec: csrSpec{cn: "system:node:node-a"}, reason: "WrongOrganization"},
		{name: "refuse/a DNS SAN", signer: fleet.SignerKubeletClient, username: a.Username(), usages: client,
			spec: csrSpec{cn: "system:node:node-a", orgs: nodes, dns: []string{"node-a"}}, reason: "SANsNotAllowed", check: nothingRecorded},
		{name: "refuse/an IP SAN", signer: fleet.SignerKubeletClient, username: a.Username(), usages: client,
			spec: csrSpec{cn: "system:node:node-a", orgs: nodes, ips: []net.IP{net.ParseIP("10.0.0.5")}}, reason: "SANsNotAllowed"},
		{name: "refuse/an email SAN", signer: fleet.SignerKubeletClient, username: a.Username(), usages: client,
			spec: csrSpec{cn: "system:node:node-a", orgs: nodes, emails: []string{"a@example.org"}}, reason: "SANsNotAllowed"},
		{name: "refuse/a URI SAN", signer: fleet.SignerKubeletClient, username: a.Username(), usages: client,
			spec: csrSpec{cn: "system:node:node-a", orgs: nodes, uris: []*url.URL{{Scheme: "spiffe", Host: "fleet", Path: "/node-a"}}}, reason: "SANsNotAllowed"},
		{name: "refuse/server auth on a client certificate", signer: fleet.SignerKubeletClient, username: a.Username(),
			usages: []string{"digital signature", "client auth", "server auth"}, spec: nodeA, reason: "WrongUsages", check: nothingRecorded},
		{name: "refuse/no client auth", signer: fleet.SignerKubeletClient, username: a.Username(), usages: []string{"digital signature"}, spec: nodeA, reason: "WrongUsages"},
		{name: "refuse/a CN that is no node", signer: fleet.SignerKubeletClient, username: a.Username(), usages: client,
			spec: csrSpec{cn: "admin", orgs: nodes}, reason: "SubjectNotANode"},
		{name: "refuse/not a certificate request", signer: fleet.SignerKubeletClient, username: a.Username(), usages: client,
			raw: []byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"), reason: "InvalidRequest"},
		{name: "refuse/another user asks for node-a", signer: fleet.SignerKubeletClient, username: "system:serviceaccount:kube-system:default", usages: client,
			spec: nodeA, reason: "RequesterNotTheNode"},
		{name: "refuse/node-b asks for node-a's name", signer: fleet.SignerKubeletClient, username: "system:node:node-b", usages: client,
			spec: nodeA, reason: "RequesterNotTheNode"},

		// Renewals: the node itself, while its device passes its checks.
		{name: "ok/renewal of an active node", prep: active(nil), signer: fleet.SignerKubeletClient, username: "system:node:node-a", usages: client,
			spec: nodeA, approve: true, reason: "AttestedDevice", check: func(t *testing.T, f approverFixture) {
				if len(f.cluster.Deleted) != 0 {
					t.Errorf("a renewal deleted token Secrets %v", f.cluster.Deleted)
				}
			}},
		{name: "ok/renewal of a node active from before fleetd approved CSRs", signer: fleet.SignerKubeletClient, username: "system:node:node-o", usages: client,
			spec: csrSpec{cn: "system:node:node-o", orgs: nodes}, approve: true, reason: "AttestedDevice"},
		{name: "ok/renewal while joining, after the approval", prep: usedOnce, signer: fleet.SignerKubeletClient, username: "system:node:node-a", usages: client,
			spec: nodeA, approve: true, reason: "AttestedDevice"},
		{name: "refuse/renewal while joining with no approval of this request", signer: fleet.SignerKubeletClient, username: "system:node:node-a", usages: client,
			spec: nodeA, reason: "NotBootstrapped"},
		{name: "refuse/renewal of a wiped device", prep: active(func(d *fleet.Device) { d.Owned.State, d.Status = fleet.StateWiped, fleet.StatusOffline }),
			signer: fleet.SignerKubeletClient, username: "system:node:node-a", usages: client, spec: nodeA, reason: "DeviceFailsItsChecks"},
		{name: "refuse/renewal while wiping", prep: active(func(d *fleet.Device) { d.Owned.State, d.Owned.Request = fleet.StateWiping, "wipe-cccccccc" }),
			signer: fleet.SignerKubeletClient, username: "system:node:node-a", usages: client, spec: nodeA, reason: "DeviceFailsItsChecks"},
		{name: "refuse/renewal after a failed boot check", prep: active(func(d *fleet.Device) { d.Owned.BootCheck = fleet.BootCheckFailed }),
			signer: fleet.SignerKubeletClient, username: "system:node:node-a", usages: client, spec: nodeA, reason: "DeviceFailsItsChecks"},
		{name: "refuse/renewal while decommissioning", prep: func(f approverFixture) {
			active(nil)(f)
			f.nb.WriteAs(fleettest.Owner, 12, func(d *fleet.Device) { d.Status = fleet.StatusDecommissioning })
		}, signer: fleet.SignerKubeletClient, username: "system:node:node-a", usages: client, spec: nodeA, reason: "DeviceFailsItsChecks"},
		{name: "refuse/renewal of a device whose fields another user wrote, nothing of fleetd's to put back", prep: func(f approverFixture) {
			f.nb.WriteAs(fleettest.Owner, 17, func(d *fleet.Device) { d.Owned.BootCheck = fleet.BootCheckOK })
		}, signer: fleet.SignerKubeletClient, username: "system:node:node-o", usages: client,
			spec: csrSpec{cn: "system:node:node-o", orgs: nodes}, reason: "DeviceNotTrusted"},
		{name: "ok/renewal after another user's write fleetd put back", prep: func(f approverFixture) {
			active(nil)(f)
			f.nb.WriteAs(fleettest.Owner, 12, func(d *fleet.Device) { d.Owned.BootCheck = fleet.BootCheckOK })
		}, signer: fleet.SignerKubeletClient, username: "system:node:node-a", usages: client, spec: nodeA, approve: true, reason: "AttestedDevice"},
		{name: "refuse/renewal after a failed boot check an editor overwrote", prep: func(f approverFixture) {
			active(func(d *fleet.Device) { d.Owned.BootCheck = fleet.BootCheckFailed })(f)
			f.nb.WriteAs(fleettest.Owner, 12, func(d *fleet.Device) { d.Owned.BootCheck = fleet.BootCheckOK })
		}, signer: fleet.SignerKubeletClient, username: "system:node:node-a", usages: client, spec: nodeA, reason: "DeviceFailsItsChecks"},

		// Renamed devices: a CSR's CN names the device, so a device renamed since its attestation
		// (fleet_identity's name) vouches for no kubelet of either name.
		{name: "refuse/renewal under a failed machine's name given to a device in good standing", prep: swapped,
			signer: fleet.SignerKubeletClient, username: "system:node:node-a", usages: client, spec: nodeA, reason: "DeviceFailsItsChecks",
			check: saysRenamed},
		{name: "refuse/serving under a failed machine's name given to a device in good standing", prep: swapped,
			signer: fleet.SignerKubeletServing, username: "system:node:node-a", usages: serving,
			spec: csrSpec{cn: "system:node:node-a", orgs: nodes, dns: []string{"node-a"}, ips: []net.IP{net.ParseIP("10.0.0.6")}}, reason: "DeviceFailsItsChecks",
			check: saysRenamed},
		{name: "refuse/renewal of a device renamed alone", prep: func(f approverFixture) {
			active(nil)(f)
			renamed(f.nb, 12, "node-x")
		}, signer: fleet.SignerKubeletClient, username: "system:node:node-x", usages: client, spec: csrSpec{cn: "system:node:node-x", orgs: nodes},
			reason: "DeviceFailsItsChecks", check: saysRenamed},
		{name: "refuse/the token of a joining device renamed since its attestation", prep: func(f approverFixture) { renamed(f.nb, 12, "node-x") },
			signer: fleet.SignerKubeletClient, username: a.Username(), usages: client, spec: csrSpec{cn: "system:node:node-x", orgs: nodes},
			reason: "DeviceFailsItsChecks", check: func(t *testing.T, f approverFixture) { saysRenamed(t, f); nothingRecorded(t, f) }},
		{name: "ok/renewal of a device attested before fleetd recorded the name, renamed", prep: func(f approverFixture) {
			active(func(d *fleet.Device) { d.Owned.Identity.Name = "" })(f)
			renamed(f.nb, 12, "node-x")
		}, signer: fleet.SignerKubeletClient, username: "system:node:node-x", usages: client, spec: csrSpec{cn: "system:node:node-x", orgs: nodes},
			approve: true, reason: "AttestedDevice"},

		// Serving certificates: the node for itself, naming only the device.
		{name: "ok/serving with the device's name and address", signer: fleet.SignerKubeletServing, username: "system:node:node-a", usages: serving,
			spec: csrSpec{cn: "system:node:node-a", orgs: nodes, dns: []string{"node-a"}, ips: []net.IP{net.ParseIP("10.0.0.5")}}, approve: true, reason: "AttestedDevice"},
		{name: "refuse/serving another address", signer: fleet.SignerKubeletServing, username: "system:node:node-a", usages: serving,
			spec: csrSpec{cn: "system:node:node-a", orgs: nodes, ips: []net.IP{net.ParseIP("10.0.0.6")}}, reason: "SANNotTheDevices"},
		{name: "refuse/serving another name", signer: fleet.SignerKubeletServing, username: "system:node:node-a", usages: serving,
			spec: csrSpec{cn: "system:node:node-a", orgs: nodes, dns: []string{"node-a", "kubernetes.default"}}, reason: "SANNotTheDevices"},
		{name: "refuse/serving for node-a asked by node-b", signer: fleet.SignerKubeletServing, username: "system:node:node-b", usages: serving,
			spec: csrSpec{cn: "system:node:node-a", orgs: nodes, dns: []string{"node-a"}}, reason: "RequesterNotTheNode"},
		{name: "refuse/serving with a bootstrap token", signer: fleet.SignerKubeletServing, username: a.Username(), usages: serving,
			spec: csrSpec{cn: "system:node:node-a", orgs: nodes, dns: []string{"node-a"}}, reason: "RequesterNotTheNode"},
		{name: "refuse/serving with no SAN", signer: fleet.SignerKubeletServing, username: "system:node:node-a", usages: serving,
			spec: nodeA, reason: "SANsRequired"},
		{name: "refuse/serving with client usages", signer: fleet.SignerKubeletServing, username: "system:node:node-a", usages: client,
			spec: csrSpec{cn: "system:node:node-a", orgs: nodes, dns: []string{"node-a"}}, reason: "WrongUsages"},
		{name: "refuse/serving of a failed device", prep: active(func(d *fleet.Device) { d.Owned.BootCheck = fleet.BootCheckFailed }),
			signer: fleet.SignerKubeletServing, username: "system:node:node-a", usages: serving,
			spec: csrSpec{cn: "system:node:node-a", orgs: nodes, dns: []string{"node-a"}}, reason: "DeviceFailsItsChecks"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			f := newApproverFixture(t)
			f.cluster.Tokens[a.ID] = fleet.BootstrapTokenSecret{Token: a}
			f.cluster.Tokens[b.ID] = fleet.BootstrapTokenSecret{Token: b}
			if r.prep != nil {
				r.prep(f)
			}
			req := r.raw
			if req == nil {
				req = csrPEM(t, r.spec)
			}
			csr := fleet.CSR{Name: "csr-1", UID: "uid-csr-1", SignerName: r.signer, Username: r.username, Usages: r.usages, Request: req}
			dec, decided, err := f.s.Membership.ReviewCSR(context.Background(), csr)
			if err != nil || !decided {
				t.Fatalf("ReviewCSR = decided %v, %v; want a decision", decided, err)
			}
			written, ok := f.cluster.Decision("csr-1")
			if !ok || written != dec {
				t.Fatalf("decision written %+v (%v), want %+v", written, ok, dec)
			}
			if dec.Approve != r.approve || dec.Reason != r.reason {
				t.Errorf("decision %v %s (%s), want approve=%v %s", dec.Approve, dec.Reason, dec.Message, r.approve, r.reason)
			}
			if dec.Message == "" {
				t.Error("a decision without a message")
			}
			word := "denied"
			if r.approve {
				word = "approved"
			}
			if n := labelled(t, f.reg, "fleetd_csr_decisions_total", "signer", r.signer, "decision", word, "reason", r.reason); n != 1 {
				t.Errorf("fleetd_csr_decisions_total{%s,%s,%s} = %v, want 1", r.signer, word, r.reason, n)
			}
			if r.check != nil {
				r.check(t, f)
			}
		})
	}
}

// TestReviewCSRUndecided: a CSR of another signer is not fleetd's, and a CSR fleetd cannot read
// NetBox for, or cannot record its approval of, is not decided (offered again), never approved.
func TestReviewCSRUndecided(t *testing.T) {
	a := tokenOf(t, 12, "provision-aaaaaaaa")
	csr := func(t *testing.T, signer string) fleet.CSR {
		return fleet.CSR{Name: "csr-1", UID: "uid-csr-1", SignerName: signer, Username: a.Username(),
			Usages: []string{"digital signature", "client auth"}, Request: csrPEM(t, csrSpec{cn: "system:node:node-a", orgs: []string{"system:nodes"}})}
	}
	t.Run("ignore/another signer", func(t *testing.T) {
		f := newApproverFixture(t)
		if _, decided, err := f.s.Membership.ReviewCSR(context.Background(), csr(t, "example.org/custom")); decided || err != nil {
			t.Errorf("ReviewCSR = decided %v, %v; want no decision", decided, err)
		}
		if len(f.cluster.Decisions) != 0 {
			t.Errorf("decisions written: %v", f.cluster.Decisions)
		}
	})
	t.Run("refuse/the approval cannot be recorded", func(t *testing.T) {
		f := newApproverFixture(t)
		f.cluster.Tokens[a.ID] = fleet.BootstrapTokenSecret{Token: a}
		f.nb.FailUpdates(func(int64, fleet.Patch) (bool, error) { return false, errors.New("NetBox answered 503") })
		_, decided, err := f.s.Membership.ReviewCSR(context.Background(), csr(t, fleet.SignerKubeletClient))
		if decided || err == nil || !strings.Contains(err.Error(), "record the approval") {
			t.Errorf("ReviewCSR = decided %v, %v; want not decided, the write's error", decided, err)
		}
		if len(f.cluster.Decisions) != 0 || len(f.cluster.Deleted) != 0 {
			t.Errorf("decisions %v, tokens deleted %v: want none", f.cluster.Decisions, f.cluster.Deleted)
		}
	})
	t.Run("refuse/the cluster refuses the decision", func(t *testing.T) {
		f := newApproverFixture(t)
		f.cluster.Fail = errors.New("the API server answered 503")
		if _, decided, err := f.s.Membership.ReviewCSR(context.Background(), csr(t, fleet.SignerKubeletClient)); decided || err == nil {
			t.Errorf("ReviewCSR = decided %v, %v; want not decided", decided, err)
		}
	})
}

// TestFirstCSRTwoInstances: two fleetd instances on one NetBox, each offered a different client
// CSR made with node-a's one bootstrap token at once (a thief racing the kubelet, or a kubelet
// that asked twice): exactly one is approved, whichever instance wins NetBox's conditional write;
// the other instance's conflicting write leaves its CSR undecided, and offered again it is denied
// TokenAlreadyUsed. The approval on record is the approved CSR's.
func TestFirstCSRTwoInstances(t *testing.T) {
	a := tokenOf(t, 12, "provision-aaaaaaaa")
	req := csrPEM(t, csrSpec{cn: "system:node:node-a", orgs: []string{"system:nodes"}})
	for round := range 20 { // the two goroutines interleave differently from round to round
		nb, cl := fleettest.NewNetBox(membershipFleet()...), fleettest.NewCluster()
		clock := fleettest.NewClock(testEpoch.Add(10 * time.Minute))
		nb.Clock = clock
		instance := func() *fleet.Service {
			s, err := fleet.NewService(fleet.Config{FleetdURL: "http://spore:8080", ConfigTTL: time.Hour, ServiceUser: fleettest.ServiceUser},
				fleet.Deps{Seal: fleettest.SealKeys(), NetBox: nb, Installer: fleettest.NewInstaller(), Catalog: fleettest.Catalog(), Clock: clock,
					Renderer: sharedRenderer(), Random: mrand.New(mrand.NewSource(1)), Cluster: cl, Registry: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		services := []*fleet.Service{instance(), instance()}
		csrs := []fleet.CSR{
			{Name: "csr-x", UID: "uid-x", SignerName: fleet.SignerKubeletClient, Username: a.Username(), Usages: []string{"digital signature", "client auth"}, Request: req},
			{Name: "csr-y", UID: "uid-y", SignerName: fleet.SignerKubeletClient, Username: a.Username(), Usages: []string{"digital signature", "client auth"}, Request: req},
		}
		decided := make([]bool, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() { _, decided[i], errs[i] = services[i].Membership.ReviewCSR(context.Background(), csrs[i]) })
		}
		wg.Wait()
		for i := range 2 { // an undecided CSR is offered again, as the informer's resync does
			if !decided[i] {
				if _, decided[i], errs[i] = services[i].Membership.ReviewCSR(context.Background(), csrs[i]); !decided[i] {
					t.Fatalf("round %d: %s offered again is still undecided: %v", round, csrs[i].Name, errs[i])
				}
			}
		}
		var approved []string
		for _, c := range csrs {
			d, ok := cl.Decision(c.Name)
			switch {
			case !ok:
				t.Fatalf("round %d: %s has no decision", round, c.Name)
			case d.Approve:
				approved = append(approved, c.Name)
			case d.Reason != "TokenAlreadyUsed":
				t.Errorf("round %d: %s denied %s, want TokenAlreadyUsed", round, c.Name, d.Reason)
			}
		}
		if len(approved) != 1 {
			t.Fatalf("round %d: approved %q, want exactly one of csr-x and csr-y", round, approved)
		}
		if got := nb.Get(12).Owned.Identity.KubeletClient; got == nil || got.Name != approved[0] {
			t.Errorf("round %d: node-a's identity records %+v, want the approval of %s", round, got, approved[0])
		}
	}
}
