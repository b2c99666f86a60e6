package chaos

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/fleet"
)

// Promise (d) for renewal (docs/enrollment.md "Renewal"): no certificate is issued or renewed
// for a device that is not active, and an active node never loses the ability to pass its
// check. The second is about what fleetd does: the certificates a node holds stay ones fleetd
// accepts (the current serials, or the ones a renewal replaced until the node presents the new
// ones) through every renewal cut. Time is the node's business: a node that checks at least
// once per half-life always holds certificates within their lifetime (the chaos stack's
// lifetime and the renewal steps are chosen for it, Runner.renew).

// checkIssued checks one save of fleetd's: a serial it had never recorded before is a new
// certificate, which only a provision's attestation (pending, for a provision) or a renewal of
// an active node (status and fleet_state active, no desired_action, the same request) may record.
func (h *history) checkIssued(d stack.OwnerDevice, at time.Time, pre, post snap) {
	for _, c := range []struct{ name, pre, post string }{{"ldevid_serial", pre.ldevid, post.ldevid}, {"lak_serial", pre.lak, post.lak}} {
		if c.post == "" || c.post == c.pre || h.issued[c.post] {
			continue // cleared, unchanged, or put back after another user's write
		}
		provision := pre.state == "pending" && requestAction(post.request) == "provision" && post.request == pre.request
		renewal := pre.state == "active" && post.state == "active" && pre.status == "active" && pre.desired == "" && post.request == pre.request
		switch {
		case renewal:
			h.renewed[c.post] = true
		case !provision:
			h.bad(PartCerts, d, at, "fleetd recorded a new certificate %s (%s) while the device was not an active node (status %q, fleet_state %q, desired_action %q, request %s): certificates are issued by a provision's attestation and renewed only for an active device",
				c.post, c.name, pre.status, pre.state, pre.desired, post.request)
		}
	}
}

// renewedSerials finds the serials a journal entry of fleetd's says a boot check renewed
// (fleet/renew.go's "renewed its LDevID <serial> (replacing …) and LAK <serial> (replacing …)").
var renewedSerials = regexp.MustCompile(`(?:LDevID|LAK) ([0-9a-f]+) \(replacing`)

// checkRenewalJournal checks fleetd's renewal journal entries against the change log: each
// serial an entry says was renewed was recorded by a renewal save of the device while it was an
// active node (checkIssued).
func (e *evidence) checkRenewalJournal(d stack.OwnerDevice, h *history) []Violation {
	var out []Violation
	for _, j := range e.src.NetBox.Journal(d.ID) {
		if j.CreatedBy != e.src.ServiceUser || !strings.Contains(j.Comments, "renewed its") {
			continue
		}
		for _, m := range renewedSerials.FindAllStringSubmatch(j.Comments, -1) {
			if !h.renewed[m[1]] {
				out = append(out, Violation{Part: PartCerts, Device: d.Name, What: fmt.Sprintf(
					"the journal entry of %s says certificate %s was renewed, but no save of the device as an active node recorded it: %q",
					j.Created.Format(time.RFC3339Nano), m[1], j.Comments)})
			}
		}
	}
	return out
}

// checkNodeCerts checks an active node at rest: the certificates its disk holds (the node
// directory its boot checks read) are ones fleetd accepts, the current serial or the one a
// renewal replaced, so that its next check passes.
func checkNodeCerts(d stack.OwnerDevice, m stack.Machine) []Violation {
	if d.StatusValue() != "active" || d.Field("fleet_state") != "active" || d.Field("desired_action") != "" {
		return nil
	}
	dir := filepath.Join(m.Dir, stack.MachineDiskDir, fleet.NodeDir)
	if _, err := os.Stat(filepath.Join(dir, fleet.NodeFileLAKCert)); err != nil {
		return nil // no installed node (the simulated OS has not booted)
	}
	var out []Violation
	for _, c := range []struct{ file, field string }{{fleet.NodeFileLDevIDCert, "ldevid_serial"}, {fleet.NodeFileLAKCert, "lak_serial"}} {
		serial, err := NodeSerial(filepath.Join(dir, c.file))
		current, previous := d.Field(c.field), d.Field(c.field+"_previous")
		switch {
		case err != nil:
			out = append(out, Violation{Part: PartCerts, Device: d.Name, What: fmt.Sprintf("an active node's %s cannot be read: %v", c.file, err)})
		case !strings.EqualFold(serial, current) && (previous == "" || !strings.EqualFold(serial, previous)):
			out = append(out, Violation{Part: PartCerts, Device: d.Name, What: fmt.Sprintf(
				"an active node lost the ability to pass its check: its %s is certificate %s, but NetBox accepts %s %q (previous %q)",
				c.file, serial, c.field, current, previous)})
		}
	}
	return out
}

// NodeSerial is the lowercase hex serial of the first certificate of a PEM file, as NetBox's
// ldevid_serial and lak_serial write it.
func NodeSerial(path string) (string, error) {
	c, err := NodeCert(path)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", c.SerialNumber.Bytes()), nil
}

// NodeCert is the first certificate of a PEM file.
func NodeCert(path string) (*x509.Certificate, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(raw)
	if b == nil {
		return nil, fmt.Errorf("%s holds no PEM block", path)
	}
	return x509.ParseCertificate(b.Bytes)
}
