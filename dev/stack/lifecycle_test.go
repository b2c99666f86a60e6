package stack_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/folly-infra/fleetd/attest/eventlogs"
	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
)

// lifecycleDevices are the test stack's own devices for the machine steps (Options.MoreDevices):
// one per class kind, two for wipe and retirement, and two whose declaration looks valid but
// whose machine must be refused at enrollment.
var lifecycleDevices = []stack.SeedDevice{
	{Name: "life-talos", Class: "talos-cp"},
	{Name: "life-nixos", Class: "nixos-builder"},
	{Name: "life-alpine", Class: "alpine-edge"},
	{Name: "life-ubuntu", Class: "ubuntu-lab"},
	{Name: "life-drift", Class: "talos-worker"},
	{Name: "life-fetch", Class: "talos-worker"},
	{Name: "life-restart", Class: "alpine-edge"},
	{Name: "life-wipe", Class: "talos-worker"},
	{Name: "life-retire", Class: "nixos-builder"},
	{Name: "refuse-two-disks", Class: "talos-worker", DuplicateDisk: true},
	{Name: "refuse-foreign-ek", Class: "talos-worker", ForeignEK: true},
	{Name: "refuse-other-kernel", Class: "talos-worker"},                                        // netboots a kernel the boot policy does not allow
	{Name: "bench-netboot", Class: "talos-worker"},                                              // BenchmarkNetboot's own machine
	{Name: "forged-flood", Class: "talos-worker"},                                               // enrolls under a flood of forged challenges
	{Name: "forged-wipe", Class: "talos-worker"},                                                // wiped, then its old fields saved back by an editor
	{Name: "forged-done", Class: "talos-worker"},                                                // a wipe reported done with nothing erased and no receipt
	{Name: "fetch-secret", Class: "alpine-edge"},                                                // its seed is fetched only with the fetch secret
	{Name: "fetch-secret-talos", Class: "talos-worker"},                                         // its machine config is fetched only with the code in its META
	{Name: "plan-ok", Class: "talos-worker"},                                                    // planned for every action, never asked
	{Name: "sealed-template", Class: "talos-worker"},                                            // installed, then copied sealed (TestSealedDevices)
	{Name: "plan-no-disk", Class: "talos-worker", NoDiskSerial: true, Faulty: "no disk_serial"}, // planned, then asked: the same rejection
}

// step runs a machine step with its output in the test log.
func step(t testing.TB, f func(context.Context, stack.Info, string, stack.StepOptions) error, name string, o stack.StepOptions) error {
	t.Helper()
	o.Out = testWriter{t}
	return f(tctx(t), testStack.Info(), name, o)
}

// accepted waits until fleetd accepted the device's request: fleet_state pending and the
// Workflow it names in the API. fleetd writes the claim first and creates the Workflow after it
// (so that a crash between the two never leaves a Workflow NetBox does not name), so pending
// alone does not yet mean that a machine netbooting now would find its Workflow.
func accepted(t testing.TB, name string) stack.OwnerDevice {
	t.Helper()
	d := waitState(t, name, "pending")
	waitWorkflow(t, name, d.Field("fleet_workflow"))
	return d
}

// installed takes a device through provision and netboot: the install Workflow succeeded and
// the configuration waits (configuring), or was delivered during it (cloud-init: active).
func installed(t *testing.T, name string) {
	t.Helper()
	ask(t, name, "provision")
	accepted(t, name)
	if err := step(t, stack.Netboot, name, stack.StepOptions{}); err != nil {
		t.Fatalf("netboot: %v", err)
	}
	waitStateIn(t, name, "configuring", "active")
}

// provisioned takes a device through provision, netboot and first boot: fleet_state active.
func provisioned(t *testing.T, name string) deviceView {
	t.Helper()
	installed(t, name)
	if err := step(t, stack.Boot, name, stack.StepOptions{}); err != nil {
		t.Fatalf("boot: %v", err)
	}
	return waitState(t, name, "active")
}

// configPath is the configuration route of a machine's class kind, with its SMBIOS identity.
func configPath(name, kind string) string {
	m := testStack.Info().Machines[name]
	switch kind {
	case "talos":
		return "/v1/config/talos?uuid=" + m.SMBIOSUUID + "&serial=" + m.SMBIOSSerial
	case "seed":
		return "/v1/config/seed?uuid=" + m.SMBIOSUUID
	}
	return "/v1/config/nocloud.tar?uuid=" + m.SMBIOSUUID
}

// machineGet GETs a fleetd path from the machine's own address, or from another one, over
// fleetd's https URL.
func machineGet(t testing.TB, name, from, path string) (int, string) {
	t.Helper()
	return machineGetAt(t, name, from, testStack.Info().Fleetd.URL, path)
}

// machineGetAt is machineGet at a base URL of fleetd (https with the stack's CA, or http).
func machineGetAt(t testing.TB, name, from, base, path string) (int, string) {
	t.Helper()
	if from == "" {
		from = strings.SplitN(testStack.Info().Machines[name].Address, "/", 2)[0]
	}
	tlsCfg, err := stack.FleetdTLS(testStack.Info())
	if err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, TLSClientConfig: tlsCfg}, Timeout: deadline}
	req, err := http.NewRequestWithContext(tctx(t), http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s from %s: %v", path, from, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMachineLifecycle: a machine of every class kind is provisioned for real — the agent
// enrolls with its swtpm, fleetd attests it, issues its certificates and authorizes its disk,
// the install Workflow succeeds — then boots, fetches its configuration once from its own
// address, and passes its first boot check, which takes the baseline (docs/design.md §1, §5, §8).
func TestMachineLifecycle(t *testing.T) {
	needStack(t)
	for name, kind := range map[string]string{"life-talos": "talos", "life-nixos": "seed", "life-alpine": "seed", "life-ubuntu": "nocloud"} {
		t.Run("ok/"+name, func(t *testing.T) {
			t.Parallel()
			d := provisioned(t, name)
			if d.StatusValue() != "active" || d.Field("ldevid_serial") == "" || d.Field("lak_serial") == "" {
				t.Errorf("after the first boot: status %s, ldevid_serial %q, lak_serial %q; want active with both serials",
					d.StatusValue(), d.Field("ldevid_serial"), d.Field("lak_serial"))
			}
			dir := testStack.Info().Machines[name].Dir
			for _, f := range []string{"workflow/ldevid.pem", "workflow/ldevid.pub", "workflow/ldevid.priv", "workflow/lak.pem",
				"workflow/lak.blob", "workflow/disk", "disk/IMAGE", "disk/var/lib/fleetd-node/lak.pem", "disk/var/lib/fleetd-node/lak.blob"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("machine file %s: %v", f, err)
				}
			}
			checkLDevIDOnNode(t, name)
			log := readFile(t, filepath.Join(dir, "log"))
			if want := "erased (simulated) " + filepath.Join(dir, "dev", "sda"); !strings.Contains(log, want) {
				t.Errorf("the machine's log does not say %q:\n%s", want, log)
			}
			checkDiskRecords(t, name, d.Field("fleet_request"))
			if code, body := machineGet(t, name, "", configPath(name, kind)); code != http.StatusGone {
				t.Errorf("refuse/second-config-fetch: %d %s, want 410 Gone", code, body)
			}
			if err := step(t, stack.BootCheck, name, stack.StepOptions{}); err != nil {
				t.Fatalf("boot check: %v", err)
			}
			d = device(t, name)
			if d.Field("boot_check") != "ok" || d.Field("boot_baseline") == "" || d.Field("last_boot_check") == "" {
				t.Errorf("after the first boot check: boot_check %q, baseline set %v, last_boot_check %q",
					d.Field("boot_check"), d.Field("boot_baseline") != "", d.Field("last_boot_check"))
			}
		})
	}
}

// checkLDevIDOnNode: after its first boot the installed node holds the LDevID files SPIRE's
// tpm_devid agent reads in /var/lib/fleetd-node, byte for byte what the enrollment agent wrote
// into the request's shared directory, the blobs 0600 (docs/enrollment.md).
func checkLDevIDOnNode(t *testing.T, name string) {
	t.Helper()
	dir := testStack.Info().Machines[name].Dir
	files, err := stack.LDevIDFiles(testStack.Info(), name)
	if err != nil {
		t.Fatal(err)
	}
	for f, mode := range map[string]os.FileMode{"ldevid.pem": 0o644, "ldevid.pub": 0o600, "ldevid.priv": 0o600} {
		got, ok := files[f]
		if !ok {
			t.Errorf("after its first boot the node has no %s in /var/lib/fleetd-node", f)
			continue
		}
		if want := readFile(t, filepath.Join(dir, "workflow", f)); string(got) != want {
			t.Errorf("the node's %s (%d bytes) differs from the one the agent wrote into the shared directory (%d bytes)", f, len(got), len(want))
		}
		if st, err := os.Stat(filepath.Join(dir, "disk/var/lib/fleetd-node", f)); err != nil {
			t.Error(err)
		} else if st.Mode().Perm() != mode {
			t.Errorf("the node's %s has mode %v, want %v", f, st.Mode().Perm(), mode)
		}
	}
}

// TestConfigFetchRefusals: the configuration pending for a machine is served only to the
// request from its NetBox address with its attested SMBIOS UUID (and its fetch secret:
// TestTalosFetchSecret), on its kind's route, and only
// over TLS (fleetd's plain listener answers 403 tls_required); refused requests do not consume
// it (docs/design.md §6).
func TestConfigFetchRefusals(t *testing.T) {
	needStack(t)
	name := "life-fetch"
	installed(t, name)
	m := testStack.Info().Machines[name]
	tests := []struct {
		name, from, path string
		code             int
		error            string
	}{
		{"refuse/from-an-address-no-device-has", "127.0.0.1", configPath(name, "talos"), http.StatusNotFound, "unknown_address"},
		{"refuse/another-uuid", "", "/v1/config/talos?uuid=00000000-0000-4000-8000-000000000000&serial=" + m.SMBIOSSerial, http.StatusForbidden, "wrong_uuid"},
		// The secret is checked before the kind: another kind's route without it tells nothing
		// of what is pending (with it: TestTalosFetchSecret's refuse/another-kind).
		{"refuse/another-kind-without-the-secret", "", configPath(name, "seed"), http.StatusForbidden, "fetch_secret_missing"},
		{"refuse/no-uuid", "", "/v1/config/talos", http.StatusBadRequest, "missing_uuid"},
		{"refuse/plain-http", "", configPath(name, "talos"), http.StatusForbidden, "tls_required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := testStack.Info().Fleetd.URL
			if tc.error == "tls_required" {
				base = testStack.Info().Fleetd.HTTPURL
			}
			code, body := machineGetAt(t, name, tc.from, base, tc.path)
			if code != tc.code || !strings.Contains(body, `"`+tc.error+`"`) {
				t.Errorf("GET %s from %q = %d %s, want %d %s", tc.path, tc.from, code, body, tc.code, tc.error)
			}
		})
	}
	if err := step(t, stack.Boot, name, stack.StepOptions{}); err != nil {
		t.Fatalf("ok/the-machine-itself after the refusals: %v", err)
	}
	waitState(t, name, "active")
}

// TestMachineDrift: a boot check after a changed boot (another firmware's event log) is accepted
// as drift, naming what changed; the known boot passes again.
func TestMachineDrift(t *testing.T) {
	needStack(t)
	name := "life-drift"
	provisioned(t, name)
	if err := step(t, stack.BootCheck, name, stack.StepOptions{}); err != nil {
		t.Fatalf("baseline boot check: %v", err)
	}
	err := step(t, stack.BootCheck, name, stack.StepOptions{EventLog: eventlogs.COS85SecureBoot})
	if err == nil || !strings.Contains(err.Error(), "fleetd recorded drift") {
		t.Fatalf("drift/changed-boot: %v, want drift", err)
	}
	if d := device(t, name); d.Field("boot_check") != "drift" {
		t.Errorf("boot_check = %q after a changed boot, want drift", d.Field("boot_check"))
	}
	if err := step(t, stack.BootCheck, name, stack.StepOptions{}); err != nil {
		t.Fatalf("ok/known-boot-again: %v", err)
	}
	if d := device(t, name); d.Field("boot_check") != "ok" {
		t.Errorf("boot_check = %q after the known boot, want ok", d.Field("boot_check"))
	}
}

// TestMachineWipeAndRetire: a wipe and a retirement attest the machine again, erase the declared
// disk (the node's files with it), send the machine's swtpm's receipt of the erase, which fleetd
// verifies and records (wiped or retired, the certificates cleared) before it answers; a boot
// check with a copy of the old LAK files is refused afterwards.
func TestMachineWipeAndRetire(t *testing.T) {
	needStack(t)
	tests := []struct {
		name, device string
		request      map[string]any
		state        string
		status       string
	}{
		{"ok/wipe", "life-wipe", desired("wipe"), "wiped", "offline"},
		{"ok/retire", "life-retire", map[string]any{"status": "decommissioning"}, "retired", "decommissioning"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			provisioned(t, tc.device)
			nodeDir := filepath.Join(testStack.Info().Machines[tc.device].Dir, "disk", "var", "lib", "fleetd-node")
			saved := copyDir(t, nodeDir, t.TempDir())
			patch(t, tc.device, tc.request)
			accepted(t, tc.device)
			if err := step(t, stack.Netboot, tc.device, stack.StepOptions{}); err != nil {
				t.Fatalf("netboot: %v", err)
			}
			d := waitState(t, tc.device, tc.state)
			if d.StatusValue() != tc.status || d.Field("ldevid_serial") != "" || d.Field("lak_serial") != "" {
				t.Errorf("status %s, ldevid_serial %q, lak_serial %q; want %s with the serials cleared",
					d.StatusValue(), d.Field("ldevid_serial"), d.Field("lak_serial"), tc.status)
			}
			if msg := d.Field("fleet_message"); !strings.Contains(msg, "the machine's TPM confirmed the erase of disk "+testStack.Info().Machines[tc.device].DiskSerial+" (method simulated") {
				t.Errorf("fleet_message %q, want the receipt's confirmation", msg)
			}
			if _, err := os.Stat(filepath.Join(nodeDir, "lak.pem")); !os.IsNotExist(err) {
				t.Errorf("the %s disk still holds the node files: %v", tc.state, err)
			}
			checkReceipt(t, tc.device)
			// A copy of the old LAK files, taken before the erasure, proves nothing any more.
			copyDir(t, saved, nodeDir)
			if err := step(t, stack.BootCheck, tc.device, stack.StepOptions{}); err == nil || !strings.Contains(err.Error(), "lak_not_current") {
				t.Errorf("refuse/old-lak: boot check after %s: %v, want lak_not_current", tc.state, err)
			}
		})
	}
}

// checkReceipt checks the machine's records of its last wipe: the erase of the declared disk,
// then the receipt step, which quoted the erase's report (the simulated erase's method) with the
// swtpm and was answered by fleetd "recorded" for the same request (docs/http.md, "Wipe
// receipts").
func checkReceipt(t *testing.T, name string) {
	t.Helper()
	m := testStack.Info().Machines[name]
	recs, err := stack.ReadRecords(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var wipe stack.Record
	for _, r := range recs {
		switch {
		case r.Kind == stack.RecordWipe:
			wipe = r
		case r.Kind == stack.RecordReceipt && wipe.Kind != "" && r.Field("request") == wipe.Field("request"):
			if r.Field("serial") != m.DiskSerial || r.Field("method") != "simulated" || r.Field("outcome") != "recorded" {
				t.Errorf("receipt record %+v, want the declared disk %s erased by the simulation and fleetd's answer recorded", r.Fields, m.DiskSerial)
			}
			return
		}
	}
	t.Errorf("no receipt record after the erase of request %s (records %d)", wipe.Field("request"), len(recs))
}

// TestForgedWipeCompletion: a wipe whose erase and receipt steps are forged — their containers
// exit 0 without running, so the worker reports every action succeeded, as a wipe image that
// does nothing or a host speaking the worker protocol would — is recorded unconfirmed, never
// wiped: the disk still holds the node's files, the certificates are cleared, the journal says
// the erase was not confirmed (danger), and the next listing counts it in
// fleetd_unconfirmed_devices, the metric of the alert FleetdWipeUnconfirmed. The owner asks for
// the wipe again, and the machine's own wipe is recorded wiped on its receipt.
func TestForgedWipeCompletion(t *testing.T) {
	needStack(t)
	const name = "forged-done"
	provisioned(t, name)
	nodeDir := filepath.Join(testStack.Info().Machines[name].Dir, "disk", "var", "lib", "fleetd-node")
	ask(t, name, "wipe")
	req := accepted(t, name).Field("fleet_request")
	if err := step(t, stack.Netboot, name, stack.StepOptions{Forge: []string{"wipe-disk", "wipe-receipt"}}); err != nil {
		t.Fatalf("the forged netboot: %v (its Workflow must succeed: every forged action exits 0)", err)
	}
	d := waitState(t, name, "unconfirmed")
	if d.StatusValue() != "failed" || d.Field("ldevid_serial") != "" || d.Field("lak_serial") != "" || d.Field("fleet_request") != req {
		t.Errorf("status %s, ldevid_serial %q, lak_serial %q, request %s; want failed, the serials cleared, request %s",
			d.StatusValue(), d.Field("ldevid_serial"), d.Field("lak_serial"), d.Field("fleet_request"), req)
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "lak.pem")); err != nil {
		t.Errorf("the forged wipe erased the node's files (%v): the test did not forge the erase", err)
	}
	var entry *stack.JournalEntry
	eventually(t, "the unconfirmed wipe's journal entry", func() (bool, string) {
		for _, e := range journal(t, name) {
			if strings.HasPrefix(e.Comments, "wipe request "+req+" unconfirmed") {
				entry = &e
				return true, ""
			}
		}
		return false, "none yet"
	})
	if entry.KindValue() != "danger" || !strings.Contains(entry.Comments, "no receipt from the machine's TPM") ||
		!strings.Contains(entry.Comments, "set desired_action=wipe again") {
		t.Errorf("journal entry %s: %q, want danger, saying no receipt confirmed the erase and how to ask again", entry.KindValue(), entry.Comments)
	}
	if n := metric(t, "fleetd_requests_total", "action", "wipe", "result", "unconfirmed"); n < 1 {
		t.Errorf("fleetd_requests_total{action=wipe,result=unconfirmed} = %v, want at least 1", n)
	}
	waitReconciles(t, reconcileRuns(t), 1) // a listing of the whole fleet sets the gauge
	if n := metric(t, "fleetd_unconfirmed_devices"); n < 1 {
		t.Errorf("fleetd_unconfirmed_devices = %v after a listing, want at least 1 (FleetdWipeUnconfirmed fires on > 0)", n)
	}

	// The owner asks again: the machine runs the wipe, and its receipt records it.
	ask(t, name, "wipe")
	accepted(t, name)
	if err := step(t, stack.Netboot, name, stack.StepOptions{}); err != nil {
		t.Fatalf("the wipe asked again: %v", err)
	}
	if d := waitState(t, name, "wiped"); d.StatusValue() != "offline" {
		t.Errorf("status %s after the receipt, want offline", d.StatusValue())
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "lak.pem")); !os.IsNotExist(err) {
		t.Errorf("the wiped disk still holds the node files: %v", err)
	}
	checkReceipt(t, name)
}

// copyDir copies the regular files of src into dst (created) and returns dst.
func copyDir(t testing.TB, src, dst string) string {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestMachineRefusedAtEnrollment: declarations that look valid but do not match the machine
// are refused by fleetd when the agent enrolls: the first action fails, nothing is authorized
// (no disk file, no wipe) and the request fails with the reason (docs/design.md §1 step 4, §4).
func TestMachineRefusedAtEnrollment(t *testing.T) {
	needStack(t)
	tests := []struct {
		name, device, reason string
		boot                 []byte // the netboot's event log; nil is the machine's own (the policy's)
	}{
		{"refuse/two-disks-with-the-serial", "refuse-two-disks", "(disk_ambiguous): More than one disk of the machine has the declared disk_serial", nil},
		{"refuse/ek-not-approved", "refuse-foreign-ek", "(ek_not_approved): The machine's EK is not among the device's approved ek_sha256", nil},
		{"refuse/a-kernel-the-boot-policy-does-not-allow", "refuse-other-kernel", "(boot_policy): The verified boot is not one the boot policy allows", eventlogs.RHEL8OtherKernel()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ask(t, tc.device, "provision")
			accepted(t, tc.device)
			err := step(t, stack.Netboot, tc.device, stack.StepOptions{EventLog: tc.boot})
			if err == nil || !strings.Contains(err.Error(), "fleetd-enroll FAILED") {
				t.Fatalf("netboot = %v, want the enrollment to fail", err)
			}
			d := waitState(t, tc.device, "failed")
			if msg := d.Field("fleet_message"); !strings.Contains(msg, tc.reason) {
				t.Errorf("fleet_message %q does not say %q", msg, tc.reason)
			}
			dir := testStack.Info().Machines[tc.device].Dir
			if _, err := os.Stat(filepath.Join(dir, "workflow", "disk")); !os.IsNotExist(err) {
				t.Errorf("a refused machine has a disk authorization: %v", err)
			}
			if log := readFile(t, filepath.Join(dir, "log")); strings.Contains(log, "erased") {
				t.Errorf("a refused machine's disk was erased:\n%s", log)
			}
			if recs, err := stack.ReadRecords(dir); err != nil || len(recs) != 0 {
				t.Errorf("a refused machine's log has records %+v (%v), want none: nothing authorized, nothing written", recs, err)
			}
			wf := &tinkerbell.Workflow{}
			if err := testStack.Kube().Get(tctx(t), client.ObjectKey{Namespace: testStack.Info().Namespace, Name: d.Field("fleet_workflow")}, wf); err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(string(wf.Status.State), "FAILED") || wf.CurrentAction() != "fleetd-enroll" {
				t.Errorf("Workflow %s is %s at %s, want FAILED at fleetd-enroll", wf.Name, wf.Status.State, wf.CurrentAction())
			}
		})
	}
}

// TestNetbootWithoutWorkflow: a machine no Workflow waits for does nothing and says why.
func TestNetbootWithoutWorkflow(t *testing.T) {
	needStack(t)
	if err := step(t, stack.Netboot, "fault-no-ek", stack.StepOptions{}); err == nil || !strings.Contains(err.Error(), "no Workflow") {
		t.Errorf("netboot without a Workflow = %v, want an error saying no Workflow waits", err)
	}
	if err := step(t, stack.Boot, "fault-no-ek", stack.StepOptions{}); err == nil || !strings.Contains(err.Error(), "nothing is installed") {
		t.Errorf("boot of an uninstalled machine = %v, want an error saying nothing is installed", err)
	}
	if err := step(t, stack.Netboot, "g2-1", stack.StepOptions{}); err == nil || !strings.Contains(err.Error(), "no simulated machine") {
		t.Errorf("netboot of a TPM 1.2 device = %v, want an error saying it has no machine", err)
	}
}

// checkDiskRecords checks the machine's records of a provision request: one enrollment, then a
// wipe and an image write of the disk it authorized, whose serial is the declared one.
func checkDiskRecords(t *testing.T, name, request string) {
	t.Helper()
	m := testStack.Info().Machines[name]
	recs, err := stack.ReadRecords(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var authorized string
	for _, r := range recs {
		if r.Field("request") != request {
			continue
		}
		kinds = append(kinds, r.Kind)
		switch r.Kind {
		case stack.RecordEnrolled:
			authorized = r.Field("disk")
			if r.Field("ldevid_serial") == "" || r.Field("lak_serial") == "" {
				t.Errorf("the enrollment record names no certificates: %+v", r)
			}
		case stack.RecordWipe, stack.RecordImage, stack.RecordNoCloud:
			if authorized == "" || r.Field("disk") != authorized || r.Field("serial") != m.DiskSerial {
				t.Errorf("%s record %+v: want it after an enrollment, acting on its disk %q with serial %s", r.Kind, r.Fields, authorized, m.DiskSerial)
			}
		}
	}
	if len(kinds) < 3 || kinds[0] != stack.RecordEnrolled || kinds[1] != stack.RecordWipe || kinds[2] != stack.RecordImage {
		t.Errorf("records of request %s: %v, want enrolled, wipe, image first", request, kinds)
	}
}
