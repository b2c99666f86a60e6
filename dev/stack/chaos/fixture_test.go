package chaos_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/dev/netboxemu"
	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/stack/chaos"
	"github.com/folly-infra/fleetd/dev/swtpm"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/workflows"
)

// fixture is a device of the test's own: an emulator holding it, a namespace for its Workflows,
// and its machine's directory.
type fixture struct {
	t                 *testing.T
	emu               *netboxemu.Emulator
	ownerTok, fleetTk string
	id                int64
	name, ns          string
	kc                client.Client
	m                 stack.Machine
}

func newFixture(t *testing.T, i int, approved bool) *fixture {
	t.Helper()
	f := &fixture{t: t, name: fmt.Sprintf("chk-%d", i), ns: fmt.Sprintf("chaos-check-%d-%d", i, time.Now().UnixNano()%100000)}
	f.m = newMachine(t)
	ek := strings.Repeat("ab", 32)
	if approved {
		tpm, err := swtpm.Read(filepath.Join(f.m.Dir, stack.MachineTPMDir))
		if err != nil {
			t.Fatal(err)
		}
		ek = tpm.EKSHA256
	}
	var err error
	if f.emu, err = netboxemu.Start(netboxemu.Config{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.emu.Close() })
	raw, err := os.ReadFile(filepath.Join(testStack.Info().Dir, "netbox-webhooks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.emu.LoadSchema(raw, "http://127.0.0.1:9", "unused"); err != nil {
		t.Fatal(err)
	}
	if f.fleetTk, err = f.emu.AddToken(netboxemu.TokenSpec{User: stack.ServiceUser}); err != nil {
		t.Fatal(err)
	}
	if f.ownerTok, err = f.emu.AddToken(netboxemu.TokenSpec{User: stack.OwnerUser}); err != nil {
		t.Fatal(err)
	}
	f.id, err = f.emu.AddDevice(netboxemu.DeviceSpec{Name: f.name, PrimaryIPv4: "127.9.0.1/8",
		Interfaces:   []netboxemu.InterfaceSpec{{Name: "eth0", MACs: []string{"02:f9:00:00:00:01"}}},
		CustomFields: map[string]any{"fleet_class": "talos-worker", "disk_serial": "SER-A", "ek_sha256": ek}})
	if err != nil {
		t.Fatal(err)
	}
	// The stack's API server serves only the Tinkerbell CRDs: a namespace needs no object.
	f.kc = testStack.Kube()
	return f
}

// newMachine writes a machine directory: the EK certificate of one of the stack's TPMs, two
// disks (sda with serial SER-A, sdb with SER-B) with their by-id links, and an empty log.
func newMachine(t *testing.T) stack.Machine {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(testStack.Info().Machines["chaos-talos"].Dir, stack.MachineTPMDir)
	entries, err := filepath.Glob(filepath.Join(src, "*.crt"))
	if err != nil || len(entries) == 0 {
		t.Fatalf("no EK certificate in %s: %v", src, err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, stack.MachineTPMDir), 0o700))
	for _, e := range entries {
		b, err := os.ReadFile(e)
		must(err)
		must(os.WriteFile(filepath.Join(dir, stack.MachineTPMDir, filepath.Base(e)), b, 0o600))
	}
	must(os.MkdirAll(filepath.Join(dir, "dev", "disk", "by-id"), 0o700))
	must(os.MkdirAll(filepath.Join(dir, stack.MachineWorkflowDir), 0o700))
	for dev, serial := range map[string]string{"sda": "SER-A", "sdb": "SER-B"} {
		must(os.WriteFile(filepath.Join(dir, "dev", dev), nil, 0o600))
		must(os.Symlink("../../"+dev, filepath.Join(dir, "dev", "disk", "by-id", "ata-DISK_"+dev+"_"+serial)))
	}
	must(os.WriteFile(filepath.Join(dir, stack.MachineLog), nil, 0o600))
	return stack.Machine{Dir: dir}
}

func (f *fixture) sources() chaos.Sources {
	return chaos.Sources{NetBox: f.emu, Owner: stack.NewOwner(f.emu.URL(), f.ownerTok), Kube: f.kc, Namespace: f.ns,
		Machines: map[string]stack.Machine{f.name: f.m}, ServiceUser: stack.ServiceUser}
}

// cleanProvision is a provision as fleetd makes it: the owner's request, the claim, the
// Workflow, the attestation with certificates, the machine's enrollment, wipe and image, the
// install's success and the delivery, and the machine's fetch answered.
func (f *fixture) cleanProvision(req string) {
	f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
	f.claim(req, "staged")
	f.fleetd(`{"custom_fields": {"fleet_state": "installing", "ldevid_serial": "0a01", "lak_serial": "0a02"}}`)
	disk := "disk=" + f.byID("sda")
	f.record(req, "enrolled", disk, "ldevid_serial=0a01", "lak_serial=0a02")
	f.record(req, "wipe", disk, "target=/dev/sda", "serial=SER-A")
	f.record(req, "image", disk, "target=/dev/sda", "serial=SER-A")
	f.fleetd(`{"custom_fields": {"fleet_state": "configuring"}}`)
	f.fleetd(`{"custom_fields": {"fleet_state": "active"}, "status": "active"}`)
	f.record(req, "delivered", "kind=talos")
}

// attestAndDeliver is fleetd recording the attestation of the running provision with its
// certificates, then the install's success and the delivery.
func (f *fixture) attestAndDeliver() {
	f.fleetd(`{"custom_fields": {"fleet_state": "installing", "ldevid_serial": "0a01", "lak_serial": "0a02"}}`)
	f.fleetd(`{"custom_fields": {"fleet_state": "configuring"}}`)
	f.fleetd(`{"custom_fields": {"fleet_state": "active"}, "status": "active"}`)
}

// cleanWipe is a wipe as fleetd makes it: the owner's request, the claim, the attestation, the
// machine's enrollment and wipe, and wiped with the certificate serials cleared.
func (f *fixture) cleanWipe(req string) {
	f.owner(`{"custom_fields": {"desired_action": "wipe"}}`)
	f.claim(req, "")
	f.fleetd(`{"custom_fields": {"fleet_state": "wiping"}}`)
	disk := "disk=" + f.byID("sda")
	f.record(req, "enrolled", disk)
	f.record(req, "wipe", disk, "target=/dev/sda", "serial=SER-A")
	f.fleetd(`{"custom_fields": {"fleet_state": "wiped", "ldevid_serial": null, "lak_serial": null}, "status": "offline"}`)
}

// wipeKeepingCerts is a wipe that ends wiped without clearing the certificate serials.
func (f *fixture) wipeKeepingCerts(req string) {
	f.owner(`{"custom_fields": {"desired_action": "wipe"}}`)
	f.claim(req, "")
	f.fleetd(`{"custom_fields": {"fleet_state": "wiping"}}`)
	f.fleetd(`{"custom_fields": {"fleet_state": "wiped"}, "status": "offline"}`)
}

// refusedRequest is a provision fleetd takes and fails before anything is issued (as for a
// machine whose enrollment it refused).
func (f *fixture) refusedRequest(req string) {
	f.owner(`{"custom_fields": {"desired_action": "provision"}}`)
	f.claim(req, "staged")
	f.fleetd(`{"custom_fields": {"fleet_state": "failed"}, "status": "failed"}`)
}

// file writes an empty file into a directory of the machine's.
func (f *fixture) file(dir, name string) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Join(f.m.Dir, dir), 0o700); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.m.Dir, dir, name), nil, 0o600); err != nil {
		f.t.Fatal(err)
	}
}

// remove removes a file or directory of the machine's.
func (f *fixture) remove(rel string) {
	f.t.Helper()
	if err := os.RemoveAll(filepath.Join(f.m.Dir, rel)); err != nil {
		f.t.Fatal(err)
	}
}

// restore is fleetd putting back the fields a copy saved whole over a delivered provision req
// (cleanProvision) had changed, clearing the desired_action the copy wrote back when clear.
func (f *fixture) restore(req string, clear bool) {
	desired := ""
	if clear {
		desired = `"desired_action": null, `
	}
	f.fleetd(fmt.Sprintf(`{"custom_fields": {%s"fleet_state": "active", "fleet_request": %q, "fleet_workflow": %q, "ldevid_serial": "0a01", "lak_serial": "0a02"}}`,
		desired, req, f.wf(req)))
}

// fields is a save of the fields fleetd owns as a request req leaves them: fleet_state, the
// request, its Workflow and the certificate serials (JSON values: "null" for none).
func (f *fixture) fields(state, req, ldevid, lak string) string {
	return fmt.Sprintf(`{"custom_fields": {"fleet_state": %q, "fleet_request": %q, "fleet_workflow": %q, "ldevid_serial": %s, "lak_serial": %s}}`,
		state, req, f.wf(req), ldevid, lak)
}

// claim is fleetd taking request req (status: the status it writes, "" for none), with its
// Workflow.
func (f *fixture) claim(req, status string) { f.claimAs(req, status, "pending", f.wf(req)) }

// claimAs is a claim that writes fleet_state state and names (and creates) Workflow wf.
func (f *fixture) claimAs(req, status, state, wf string) {
	body := fmt.Sprintf(`{"custom_fields": {"desired_action": null, "fleet_state": %q, "fleet_request": %q, "fleet_workflow": %q}`, state, req, wf)
	if status != "" {
		body += fmt.Sprintf(`, "status": %q`, status)
	}
	f.fleetd(body + "}")
	f.workflow(wf, req)
}

// wf is the deterministic Workflow name of a request of the fixture's device.
func (f *fixture) wf(req string) string { return f.name + "-" + req }

func (f *fixture) workflow(name, req string) {
	f.t.Helper()
	wf := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: map[string]string{
		workflows.LabelDeviceID: fmt.Sprint(f.id), workflows.LabelRequest: req}},
		Spec: tinkv1.WorkflowSpec{TemplateRef: "talos-provision", HardwareRef: f.name}}
	if err := f.kc.Create(context.Background(), wf); err != nil {
		f.t.Fatal(err)
	}
}

// renewal is fleetd's record of a boot check's renewal of an active node: the new serials, the
// replaced ones as previous, and its journal entry.
func (f *fixture) renewal(ldevid, lak string) {
	f.fleetd(fmt.Sprintf(`{"custom_fields": {"ldevid_serial": %q, "lak_serial": %q, "ldevid_serial_previous": "0a01", "lak_serial_previous": "0a02"}}`, ldevid, lak))
	f.journal(fmt.Sprintf("Boot check of %s renewed its LDevID %s (replacing 0a01, valid until 2026-12-02T10:00:00Z) and LAK %s (replacing 0a02, valid until 2026-12-02T10:00:00Z) for the same TPM keys; the replaced serials stay accepted until the node presents the new ones.", f.name, ldevid, lak))
}

// journal writes a journal entry on the device as fleetd.
func (f *fixture) journal(comments string) {
	f.t.Helper()
	body, _ := json.Marshal(map[string]any{"assigned_object_type": "dcim.device", "assigned_object_id": f.id, "kind": "info", "comments": comments})
	req, err := http.NewRequest(http.MethodPost, f.emu.URL()+"/api/extras/journal-entries/", bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Token "+f.fleetTk)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		f.t.Fatalf("POST journal entry: %s", resp.Status)
	}
}

// nodeCerts writes the installed node's ldevid.pem and lak.pem: certificates with the serials
// given (hex), as its boot checks read them.
func (f *fixture) nodeCerts(ldevid, lak string) {
	f.t.Helper()
	dir := filepath.Join(f.m.Dir, stack.MachineDiskDir, fleet.NodeDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		f.t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.t.Fatal(err)
	}
	for file, serial := range map[string]string{fleet.NodeFileLDevIDCert: ldevid, fleet.NodeFileLAKCert: lak} {
		data := []byte("not a certificate")
		if serial != "" {
			n, _ := new(big.Int).SetString(serial, 16)
			tmpl := &x509.Certificate{SerialNumber: n, Subject: pkix.Name{CommonName: f.name}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
			if err != nil {
				f.t.Fatal(err)
			}
			data = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		}
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) owner(body string)  { f.patch(f.ownerTok, body) }
func (f *fixture) fleetd(body string) { f.patch(f.fleetTk, body) }

func (f *fixture) patch(token, body string) {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodPatch, fmt.Sprintf("%s/api/dcim/devices/%d/", f.emu.URL(), f.id), strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Token "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("PATCH %s: %s", body, resp.Status)
	}
}

// byID is the machine's by-id path of a disk, as the agent writes it into the shared directory's disk file.
func (f *fixture) byID(dev string) string {
	m, _ := filepath.Glob(filepath.Join(f.m.Dir, "dev", "disk", "by-id", "*_"+dev+"_*"))
	return m[0]
}

// record appends a record line to the machine's log, as the stack's simulated actions write it
// in the request's Workflow.
func (f *fixture) record(req, kind string, kv ...string) { f.recordIn(f.wf(req), req, kind, kv...) }

// recordIn is a record written in Workflow wf.
func (f *fixture) recordIn(wf, req, kind string, kv ...string) {
	f.t.Helper()
	line := fmt.Sprintf("%s netboot: record %s request=%s workflow=%s %s\n", time.Now().UTC().Format(time.RFC3339Nano),
		kind, req, wf, strings.Join(kv, " "))
	lf, err := os.OpenFile(filepath.Join(f.m.Dir, stack.MachineLog), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		f.t.Fatal(err)
	}
	defer lf.Close()
	if _, err := lf.WriteString(line); err != nil {
		f.t.Fatal(err)
	}
}
