package stack

import (
	"bufio"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/workflows"
)

// Records: besides its words, a simulated machine's log holds one machine-readable line for each
// act that authorizes or touches its disks, saying what authorized it, so that a
// checker can tell, from the machine alone, whether every wipe and install followed a successful
// enrollment for the same request with the declared disk:
//
//	<RFC 3339 time> netboot: record <kind> key=value key=value …
//
// Kinds (Record*): enrolled (the agent exited 0; disk is what it wrote to disk in its
// FLEETD_WORKFLOW_DIR, and the serials of the certificates it wrote), and wipe, image and
// nocloud-seed (a simulated action wrote to a disk: disk is that file as the action read it,
// target the block device it acted on (nocloud-seed: the disk of the partition it wrote, also
// named), serial that device's serial in sysfs), and delivered (the installed OS's configuration fetch was answered with a
// configuration: the class kind and the SHA-256 of what it got; a NoCloud seed is read from the
// disk, so it has none), and receipt (the receipt step's agent exited 0: the serial, method and
// bytes of the report it quoted, and fleetd's answer as outcome). Every record names the Workflow and the request (from its
// hardwareMap; delivered: those of the disk's last image record, the install the configuration
// is for). Values never hold spaces; an absent value is "-".
const (
	RecordEnrolled  = "enrolled"
	RecordWipe      = "wipe"
	RecordImage     = "image"
	RecordNoCloud   = "nocloud-seed"
	RecordDelivered = "delivered"
	RecordReceipt   = "receipt"
)

// Record is one record line of a machine's log.
type Record struct {
	Time   time.Time
	Kind   string
	Fields map[string]string // workflow, request, action, disk, target, partition, serial, ldevid_serial, lak_serial
}

// Field returns a field's value, "" when absent.
func (r Record) Field(k string) string {
	if v := r.Fields[k]; v != "-" {
		return v
	}
	return ""
}

// record writes one record line for action a of Workflow wf, with the given key/value pairs.
func (mc *machine) record(kind string, wf *tinkerbell.Workflow, a tinkerbell.Action, kv ...string) {
	fields := map[string]string{"workflow": wf.Name, "request": wf.Spec.HardwareMap[workflows.MapRequest], "action": a.Name}
	for i := 0; i+1 < len(kv); i += 2 {
		fields[kv[i]] = kv[i+1]
	}
	mc.writeRecord(kind, fields)
}

// recordDelivery writes the record of a configuration the installed OS's fetch was answered
// with, for the install that wrote the disk last (its image record's Workflow and request).
func (mc *machine) recordDelivery(kind fleet.Kind, body []byte) {
	sum := sha256.Sum256(body)
	fields := map[string]string{"kind": string(kind), "sha256": hex.EncodeToString(sum[:])}
	if recs, err := ReadRecords(mc.m.Dir); err == nil {
		for i := len(recs) - 1; i >= 0; i-- {
			if recs[i].Kind == RecordImage {
				fields["workflow"], fields["request"] = recs[i].Fields["workflow"], recs[i].Fields["request"]
				break
			}
		}
	}
	mc.writeRecord(RecordDelivered, fields)
}

// writeRecord writes one record line.
func (mc *machine) writeRecord(kind string, fields map[string]string) {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		v := strings.Join(strings.Fields(fields[k]), "_")
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	fmt.Fprintf(mc.log, "%s %s: record %s%s\n", time.Now().UTC().Format(time.RFC3339Nano), mc.step, kind, b.String())
}

// workflowDisk is the disk file of the action's workflow directory (the agent's authorization,
// /workflow/disk in a v0.12.2 container) as the action reads it now ("" when absent).
func (mc *machine) workflowDisk(a tinkerbell.Action) string {
	b, _ := os.ReadFile(filepath.Join(a.Env["FLEETD_WORKFLOW_DIR"], "disk"))
	return strings.TrimSpace(string(b))
}

// blockSerial is the serial sysfs gives block device dev ("sda").
func (mc *machine) blockSerial(dev string) string {
	b, _ := os.ReadFile(mc.path(MachineSysDir, "block", dev, "device", "serial"))
	return strings.TrimSpace(string(b))
}

// certSerial is the hex serial of the first certificate of a PEM file in the action's workflow
// directory, as fleetd writes ldevid_serial and lak_serial ("" when absent).
func (mc *machine) certSerial(a tinkerbell.Action, name string) string {
	b, err := os.ReadFile(filepath.Join(a.Env["FLEETD_WORKFLOW_DIR"], name))
	if err != nil {
		return ""
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return "unparsable"
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "unparsable"
	}
	return hex.EncodeToString(c.SerialNumber.Bytes())
}

// ReadRecords reads the record lines of the machine whose directory is dir, oldest first.
func ReadRecords(dir string) ([]Record, error) {
	f, err := os.Open(filepath.Join(dir, MachineLog))
	if err != nil {
		return nil, fmt.Errorf("read the records of machine %s: %w", dir, err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		stamp, rest, ok := strings.Cut(line, " ")
		_, rest, ok2 := strings.Cut(rest, ": record ")
		if !ok || !ok2 || strings.HasPrefix(line, " ") {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			return nil, fmt.Errorf("read the records of machine %s: line %q: %w", dir, line, err)
		}
		parts := strings.Fields(rest)
		r := Record{Time: t, Kind: parts[0], Fields: map[string]string{}}
		for _, kv := range parts[1:] {
			if k, v, ok := strings.Cut(kv, "="); ok {
				r.Fields[k] = v
			}
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the records of machine %s: %w", dir, err)
	}
	return out, nil
}
