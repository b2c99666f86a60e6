package pki_test

import (
	"bytes"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/pki"
)

// issuerAt is an issuer whose clock the test moves, with the given LDevID lifetime and renewal
// point (0: the default, half the lifetime).
func issuerAt(t *testing.T, now *time.Time, ldevidLifetime, renewAfter time.Duration) *pki.Issuer {
	t.Helper()
	ca := newCA(t, "fleetd CA")
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ca, LAK: ca, LDevIDLifetime: ldevidLifetime, LAKLifetime: 30 * 24 * time.Hour,
		LDevIDRenewAfter: renewAfter, Rand: seeded(3), Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return iss
}

// TestRenewalDue is the renewal point of docs/enrollment.md: half the lifetime by default, or
// renew_after; a certificate issued under another lifetime is renewed in time; and nothing is
// due when the CA's own expiry would cap the new certificate at the old one's.
func TestRenewalDue(t *testing.T) {
	const week = 7 * 24 * time.Hour
	rows := []struct {
		name                 string
		issueLifetime        time.Duration // the lifetime the certificate was issued under
		lifetime, renewAfter time.Duration // the issuer's settings when the check runs
		age                  time.Duration // how long after the issue the check runs
		want                 bool
	}{
		{"not-due/fresh", week, week, 0, time.Hour, false},
		{"not-due/just before half-life", week, week, 0, week/2 - time.Minute, false},
		{"due/at half-life", week, week, 0, week / 2, true},
		{"due/expired", week, week, 0, 2 * week, true},
		{"not-due/before renew_after", week, week, 6 * 24 * time.Hour, 5 * 24 * time.Hour, false},
		{"due/at renew_after", week, week, 6 * 24 * time.Hour, 6 * 24 * time.Hour, true},
		{"due/a year's certificate under a week's lifetime", 365 * 24 * time.Hour, week, 0, week / 2, true},
		{"not-due/a year's certificate, young", 365 * 24 * time.Hour, week, 0, 3 * 24 * time.Hour, false},
		{"due/a week's certificate under a year's lifetime, near its end", week, 365 * 24 * time.Hour, 0, 6 * 24 * time.Hour, true},
		// Issued under 4 days, checked under a week (renewal point 3.5 days): young by its age,
		// due by what is left of it (3.5 days) from the moment that is the profile's remainder.
		{"due/a 4 days' certificate under a week's lifetime, exactly what the profile leaves", 4 * 24 * time.Hour, week, 0, 12 * time.Hour, true},
		{"not-due/the same, a second before", 4 * 24 * time.Hour, week, 0, 12*time.Hour - time.Second, false},
		// Issued under a year, checked under a week: due by its age alone.
		{"not-due/a year's certificate, a second before half the week", 365 * 24 * time.Hour, week, 0, week/2 - time.Second, false},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			now := t0.Add(time.Hour)
			old := issuerAt(t, &now, r.issueLifetime, 0)
			c, err := old.IssueLDevID(id, p256(t))
			if err != nil {
				t.Fatal(err)
			}
			iss := issuerAt(t, &now, r.lifetime, r.renewAfter)
			now = now.Add(r.age)
			if got := iss.RenewalDue(pki.ProfileLDevID, c.Leaf); got != r.want {
				t.Errorf("RenewalDue after %s = %v, want %v (renewal point %s)", r.age, got, r.want, iss.RenewalPoint(pki.ProfileLDevID, c.Leaf))
			}
			if p := iss.RenewalPoint(pki.ProfileLDevID, c.Leaf); !now.Before(p) != r.want {
				t.Errorf("RenewalPoint %s disagrees with RenewalDue %v at %s", p, r.want, now)
			}
		})
	}
}

// TestRenewalDueCappedByCA: a certificate already capped at the CA's expiry is not due, since
// its renewal would end at the same time (renewing it every hour would gain nothing).
func TestRenewalDueCappedByCA(t *testing.T) {
	now := t0
	ca, _, err := pki.NewCA(pki.NewCAConfig{Name: "short CA", Lifetime: 10 * 24 * time.Hour, Rand: seeded(1), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ca, LAK: ca, LDevIDLifetime: 30 * 24 * time.Hour, LAKLifetime: 30 * 24 * time.Hour,
		Rand: seeded(3), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := iss.IssueLAK(id, p256(t))
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(20 * 24 * time.Hour)
	if iss.RenewalDue(pki.ProfileLAK, c.Leaf) {
		t.Errorf("a LAK capped at the CA's NotAfter %s is due; a renewal would end at the same time", ca.Cert.NotAfter)
	}
}

// TestRenewKeepsKeyAndIdentity: a renewal is a new certificate (new serial) for the same key,
// the same device and the same EK-derived hwSerialNum.
func TestRenewKeepsKeyAndIdentity(t *testing.T) {
	iss, _, _ := newIssuer(t)
	key := p256(t)
	old, err := iss.IssueLDevID(id, key)
	if err != nil {
		t.Fatal(err)
	}
	rid, err := pki.RenewIdentity("node-a", "SN-0042", old.Leaf)
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := iss.IssueLDevID(rid, old.Leaf.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.SerialHex() == old.SerialHex() {
		t.Errorf("the renewal kept serial %s", old.SerialHex())
	}
	if !bytes.Equal(renewed.Leaf.RawSubjectPublicKeyInfo, old.Leaf.RawSubjectPublicKeyInfo) {
		t.Error("the renewal certifies another key")
	}
	_, hw, _, err := pki.HardwareModuleName(renewed.Leaf)
	if err != nil || !bytes.Equal(hw, id.HWSerialNum) || renewed.Leaf.Subject.CommonName != "node-a" {
		t.Errorf("renewed identity: CN %q hwSerialNum %q (%v), want node-a %q", renewed.Leaf.Subject.CommonName, hw, err, id.HWSerialNum)
	}
	if _, err := pki.RenewIdentity("node-a", "", &x509.Certificate{}); err == nil || !strings.Contains(err.Error(), "hardwareModuleName") {
		t.Errorf("RenewIdentity of a certificate without the SAN: %v, want a hardwareModuleName error", err)
	}
}

// TestNewIssuer: an issuer needs both CAs, positive lifetimes, its randomness and clock, and
// renewal points within the lifetimes (zero: half the lifetime); anything else is a wiring error
// named here.
func TestNewIssuer(t *testing.T) {
	ca := newCA(t, "fleetd CA")
	ok := func() pki.IssuerConfig {
		return pki.IssuerConfig{LDevID: ca, LAK: ca, LDevIDLifetime: time.Hour, LAKLifetime: 2 * time.Hour, Rand: seeded(3), Now: func() time.Time { return t0 }}
	}
	rows := []struct {
		name string
		edit func(c *pki.IssuerConfig)
		want string // "" accepted
	}{
		{"ok/renewal points left to their default", func(c *pki.IssuerConfig) {}, ""},
		{"ok/renewal points just within the lifetimes", func(c *pki.IssuerConfig) {
			c.LDevIDRenewAfter, c.LAKRenewAfter = time.Hour-time.Nanosecond, 2*time.Hour-time.Nanosecond
		}, ""},
		{"ok/the shortest lifetime: its default renewal point is 0, renewed at every check", func(c *pki.IssuerConfig) {
			c.LDevIDLifetime, c.LAKLifetime = time.Nanosecond, time.Nanosecond
		}, ""},
		{"refuse/no LDevID CA", func(c *pki.IssuerConfig) { c.LDevID = nil }, "both the LDevID CA and the LAK CA"},
		{"refuse/no LAK CA", func(c *pki.IssuerConfig) { c.LAK = nil }, "both the LDevID CA and the LAK CA"},
		{"refuse/an LDevID lifetime of zero", func(c *pki.IssuerConfig) { c.LDevIDLifetime = 0 }, "lifetimes must be positive"},
		{"refuse/a negative LAK lifetime", func(c *pki.IssuerConfig) { c.LAKLifetime = -time.Hour }, "lifetimes must be positive"},
		{"refuse/no randomness", func(c *pki.IssuerConfig) { c.Rand = nil }, "Rand and Now"},
		{"refuse/no clock", func(c *pki.IssuerConfig) { c.Now = nil }, "Rand and Now"},
		{"refuse/LDevID renew_after = its lifetime", func(c *pki.IssuerConfig) { c.LDevIDRenewAfter = time.Hour }, "LDevID 1h0m0s of 1h0m0s"},
		{"refuse/LAK renew_after = its lifetime", func(c *pki.IssuerConfig) { c.LAKRenewAfter = 2 * time.Hour }, "LAK 2h0m0s of 2h0m0s"},
		{"refuse/a negative LDevID renew_after", func(c *pki.IssuerConfig) { c.LDevIDRenewAfter = -time.Second }, "LDevID -1s of 1h0m0s"},
		{"refuse/a negative LAK renew_after", func(c *pki.IssuerConfig) { c.LAKRenewAfter = -time.Second }, "LAK -1s of 2h0m0s"},
	}
	for _, r := range rows {
		cfg := ok()
		r.edit(&cfg)
		_, err := pki.NewIssuer(cfg)
		if r.want == "" && err != nil || r.want != "" && (err == nil || !strings.Contains(err.Error(), r.want)) {
			t.Errorf("%s: %v, want %q", r.name, err, r.want)
		}
	}
}

// TestRenewalPointsPerProfile: each profile renews at its own renewal point, half its own
// lifetime by default, or its renew_after.
func TestRenewalPointsPerProfile(t *testing.T) {
	ca := newCA(t, "fleetd CA")
	for _, r := range []struct {
		name                        string
		ldevidAfter, lakAfter       time.Duration
		wantLDevID, wantLAK         time.Duration // each certificate's renewal point after its issue
		ldevidLifetime, lakLifetime time.Duration
	}{
		{"ok/defaults: half of each lifetime", 0, 0, 45 * time.Hour, 12 * time.Hour, 90 * time.Hour, 24 * time.Hour},
		{"ok/renew_after of each profile", 80 * time.Hour, 20 * time.Hour, 80 * time.Hour, 20 * time.Hour, 90 * time.Hour, 24 * time.Hour},
	} {
		iss, err := pki.NewIssuer(pki.IssuerConfig{LDevID: ca, LAK: ca, LDevIDLifetime: r.ldevidLifetime, LAKLifetime: r.lakLifetime,
			LDevIDRenewAfter: r.ldevidAfter, LAKRenewAfter: r.lakAfter, Rand: seeded(3), Now: func() time.Time { return t0 }})
		if err != nil {
			t.Fatal(err)
		}
		ld, err := iss.IssueLDevID(id, p256(t))
		if err != nil {
			t.Fatal(err)
		}
		lak, err := iss.IssueLAK(id, p256(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := iss.RenewalPoint(pki.ProfileLDevID, ld.Leaf).Sub(t0); got != r.wantLDevID {
			t.Errorf("%s: the LDevID renews %s after its issue, want %s", r.name, got, r.wantLDevID)
		}
		if got := iss.RenewalPoint(pki.ProfileLAK, lak.Leaf).Sub(t0); got != r.wantLAK {
			t.Errorf("%s: the LAK renews %s after its issue, want %s", r.name, got, r.wantLAK)
		}
	}
}
