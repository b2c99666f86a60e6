package handlers_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/dev/fakehw"
	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/render"
)

// kindClasses has one installable class of every kind, with the class names devices declare.
func kindClasses() map[fleet.Kind]fleet.Class {
	talos, _ := fleettest.Catalog().Class("talos-worker")
	return map[fleet.Kind]fleet.Class{
		fleet.KindTalos:  talos,
		fleet.KindNixOS:  {Name: "nixos-builder", Kind: fleet.KindNixOS, Installable: true, Profile: "builder", SecureBoot: fleet.SecureBootAny},
		fleet.KindAlpine: {Name: "alpine-edge", Kind: fleet.KindAlpine, Installable: true, Profile: "edge", SecureBoot: fleet.SecureBootAny},
		fleet.KindCloudInit: {Name: "ubuntu", Kind: fleet.KindCloudInit, Installable: true, SecureBoot: fleet.SecureBootAny,
			CloudInit: &fleet.CloudInitClass{UserData: "#cloud-config\npackages: [htop]\n"}},
	}
}

// provisioned is node-a after a provision: enrolled by the real agent on the TPM simulator, its
// configuration fetched once over the config route, and the node files in it written into its
// node directory as its OS writes them on its first boot.
type provisioned struct {
	f        *fleetdUnderTest
	ch       channel
	workflow string // what the agent wrote in HookOS
	nodeDir  string // the installed node's /var/lib/fleetd-node
}

func provisionNode(t *testing.T, class fleet.Class) provisioned {
	t.Helper()
	sim, ch := simulatorBoot(t)
	t.Cleanup(func() { sim.Close() })
	d := fleettest.Declared(12, "node-a")
	d.Declared.Class, d.Declared.EKHashes = class.Name, []string{simulatorEK(t, ch)}
	d.Address = netip.MustParsePrefix("127.0.0.1/8") // the config routes serve only the device's address
	d.Owned = fleet.Owned{State: fleet.StatePending, Request: "provision-k3f9x2mq", Workflow: "node-a-provision-k3f9x2mq"}
	p := provisioned{f: newFleetd(t, fleet.NewCatalog(class), d), ch: ch, workflow: t.TempDir(), nodeDir: t.TempDir()}
	disk := fakehw.Disk{Dev: "nvme0n1", Serial: "S4EWNX0R123456", Model: "Samsung_SSD_980_1TB", Bus: "nvme"}
	sysRoot, devRoot, err := fakehw.Write(t.TempDir(), fakehw.Machine{UUID: machineUUID, Serial: "SN-1", TPMMajor: "2", Disks: []fakehw.Disk{disk}})
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Enroll(context.Background(), agent.EnrollConfig{Conn: agent.Conn{FleetdURL: p.f.url, RetryWait: time.Millisecond}, Device: "node-a", Request: "provision-k3f9x2mq", Channel: ch,
		SysRoot: sysRoot, DevRoot: devRoot, WorkflowDir: p.workflow, Log: zerolog.Nop()}); err != nil {
		t.Fatalf("enroll: %v", err)
	}
	body := fetchConfig(t, p.f.url, class.Kind, filepath.Join(p.workflow, agent.FileFetchSecret))
	files, err := render.DeliveredFiles(class.Kind, body)
	if err != nil {
		t.Fatal(err)
	}
	for _, nf := range files {
		path := filepath.Join(p.nodeDir, nf.Name)
		if err := os.WriteFile(path, nf.Data, nf.Mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, nf.Mode); err != nil { // WriteFile's mode is masked by the umask
			t.Fatal(err)
		}
	}
	if class.Kind == fleet.KindTalos { // the node files in text form, installed at boot (fleetd boot-check --install-only)
		if _, err := agent.InstallDelivered(p.nodeDir); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// fetchConfig fetches the pending configuration over HTTP, as the node (or, for NoCloud, the
// install Workflow in HookOS) does, with the fetch secret the agent wrote: in the
// Fleetd-Fetch-Secret header, or, for Talos, in the query's code, where Talos puts the value of
// ${code} its install wrote into META. A Talos fetch without its code is refused first, and
// consumes nothing.
func fetchConfig(t *testing.T, base string, kind fleet.Kind, secretFile string) []byte {
	t.Helper()
	secret, err := os.ReadFile(secretFile)
	if err != nil {
		t.Fatalf("the agent wrote no fetch secret: %v", err)
	}
	q := url.Values{"uuid": {machineUUID}}
	get := func(q url.Values, header string) (int, []byte) {
		req, err := http.NewRequest(http.MethodGet, base+"/v1/config/"+kind.Route()+"?"+q.Encode(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if header != "" {
			req.Header.Set(api.HeaderFetchSecret, header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	header := strings.TrimSpace(string(secret))
	if kind == fleet.KindTalos {
		q.Set("serial", "SN-1")
		if code, body := get(q, ""); code != http.StatusForbidden || !strings.Contains(string(body), `"fetch_secret_missing"`) {
			t.Fatalf("a Talos fetch without code=: %d %s, want 403 fetch_secret_missing", code, body)
		}
		q.Set("code", header)
		header = ""
	}
	code, body := get(q, header)
	if code != http.StatusOK {
		t.Fatalf("fetch the %s configuration: %d %s", kind, code, body)
	}
	return body
}

// TestDeliveredLAKFilesPassTheBootCheck provisions node-a once per class kind and runs the real
// `fleetd boot-check` against the node directory filled from the delivered configuration alone:
// the configuration carries exactly the LAK files the agent wrote in HookOS, with the modes the
// agent gives them, and they are what the boot check needs (docs/design.md §1 step 6, §5). It also
// carries the LDevID files, which every kind ends with in the node directory byte for byte as the
// agent wrote them in the shared directory (Talos once the boot check installed them from their text form):
// what SPIRE's tpm_devid agent reads (docs/enrollment.md).
func TestDeliveredLAKFilesPassTheBootCheck(t *testing.T) {
	if fleet.NodeDir != agent.DefaultNodeDir || fleet.NodeFileLAKCert != agent.FileLAKCert || fleet.NodeFileLAKBlob != agent.FileLAKBlob {
		t.Fatalf("fleet delivers %s/{%s,%s}, the boot check reads %s/{%s,%s}", fleet.NodeDir, fleet.NodeFileLAKCert, fleet.NodeFileLAKBlob,
			agent.DefaultNodeDir, agent.FileLAKCert, agent.FileLAKBlob)
	}
	for _, kind := range fleet.Kinds {
		t.Run("ok/"+string(kind), func(t *testing.T) {
			p := provisionNode(t, kindClasses()[kind])
			all, err := os.ReadDir(p.nodeDir)
			if err != nil {
				t.Fatal(err)
			}
			var entries []string
			for _, e := range all {
				if !strings.HasSuffix(e.Name(), agent.TextFormSuffix) {
					entries = append(entries, e.Name())
				}
			}
			if len(entries) != 5 {
				t.Errorf("the configuration delivered %d node files, want the two LAK files and the three LDevID files: %v", len(entries), entries)
			}
			for name, mode := range map[string]os.FileMode{agent.FileLAKCert: 0o644, agent.FileLAKBlob: 0o600} {
				got, err := os.ReadFile(filepath.Join(p.nodeDir, name))
				if err != nil {
					t.Fatalf("the configuration did not deliver %s: %v", name, err)
				}
				if want, _ := os.ReadFile(filepath.Join(p.workflow, name)); !bytes.Equal(got, want) {
					t.Errorf("delivered %s differs from the one the agent wrote in the shared directory", name)
				}
				if st, _ := os.Stat(filepath.Join(p.nodeDir, name)); st.Mode().Perm() != mode {
					t.Errorf("delivered %s has mode %v, want %v", name, st.Mode().Perm(), mode)
				}
			}
			if got := p.f.inv.Get(12); got.Owned.State != fleet.StateActive {
				t.Fatalf("after the delivery fleet_state is %q, want active", got.Owned.State)
			}
			cfg := agent.BootCheckConfig{Conn: agent.Conn{FleetdURL: p.f.url, RetryWait: time.Millisecond}, Dir: p.nodeDir, Channel: p.ch, Log: zerolog.Nop()}
			if err := agent.BootCheck(context.Background(), cfg); err != nil {
				t.Fatalf("boot check with the delivered files: exit %d: %v", agent.ExitCode(err), err)
			}
			if got := p.f.inv.Get(12); got.Owned.BootCheck != fleet.BootCheckOK || got.Owned.BootBaseline == "" {
				t.Errorf("after the boot check: boot_check %q, baseline taken %v", got.Owned.BootCheck, got.Owned.BootBaseline != "")
			}
			for name, mode := range map[string]os.FileMode{agent.FileLDevIDCert: 0o644, agent.FileLDevIDPub: 0o600, agent.FileLDevIDPriv: 0o600} {
				got, err := os.ReadFile(filepath.Join(p.nodeDir, name))
				if err != nil {
					t.Fatalf("the node has no %s after its first boot check: %v", name, err)
				}
				if want, _ := os.ReadFile(filepath.Join(p.workflow, name)); !bytes.Equal(got, want) {
					t.Errorf("the node's %s differs from the one the agent wrote in the shared directory", name)
				}
				if st, _ := os.Stat(filepath.Join(p.nodeDir, name)); st.Mode().Perm() != mode {
					t.Errorf("the node's %s has mode %v, want %v", name, st.Mode().Perm(), mode)
				}
			}
		})
	}
}

// TestAttestKeepsTheNodesLAK: an attest re-proves the machine and issues nothing; the node's
// delivered LAK files stay current (lak_serial unchanged), and its next boot check, with the
// same files, takes a new baseline.
func TestAttestKeepsTheNodesLAK(t *testing.T) {
	p := provisionNode(t, kindClasses()[fleet.KindTalos])
	check := agent.BootCheckConfig{Conn: agent.Conn{FleetdURL: p.f.url, RetryWait: time.Millisecond}, Dir: p.nodeDir, Channel: p.ch, Log: zerolog.Nop()}
	if err := agent.BootCheck(context.Background(), check); err != nil {
		t.Fatalf("first boot check: %v", err)
	}
	before := p.f.inv.Get(12)
	d := before
	d.Owned.State, d.Owned.Request, d.Owned.Workflow = fleet.StatePending, "attest-7hq2vx4m", "node-a-attest-7hq2vx4m"
	p.f.inv.Set(d)

	wf := t.TempDir()
	disk := fakehw.Disk{Dev: "nvme0n1", Serial: "S4EWNX0R123456", Model: "Samsung_SSD_980_1TB", Bus: "nvme"}
	sysRoot, devRoot, err := fakehw.Write(t.TempDir(), fakehw.Machine{UUID: machineUUID, Serial: "SN-1", TPMMajor: "2", Disks: []fakehw.Disk{disk}})
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Enroll(context.Background(), agent.EnrollConfig{Conn: agent.Conn{FleetdURL: p.f.url, RetryWait: time.Millisecond}, Device: "node-a", Request: d.Owned.Request, Channel: p.ch,
		SysRoot: sysRoot, DevRoot: devRoot, WorkflowDir: wf, Log: zerolog.Nop()}); err != nil {
		t.Fatalf("attest: %v", err)
	}
	for _, name := range []string{agent.FileLDevIDCert, agent.FileLAKCert, agent.FileLAKBlob} {
		if _, err := os.Stat(filepath.Join(wf, name)); err == nil {
			t.Errorf("the attest wrote %s: it issues no certificate", name)
		}
	}
	after := p.f.inv.Get(12)
	if after.Owned.LAKSerial != before.Owned.LAKSerial || after.Owned.LDevIDSerial != before.Owned.LDevIDSerial {
		t.Errorf("the attest changed the serials: LAK %s → %s, LDevID %s → %s",
			before.Owned.LAKSerial, after.Owned.LAKSerial, before.Owned.LDevIDSerial, after.Owned.LDevIDSerial)
	}
	if after.Owned.State != fleet.StateActive || after.Owned.BootBaseline != "" || after.Owned.BootCheck != fleet.BootCheckNone {
		t.Errorf("after the attest: fleet_state %q, baseline cleared %v, boot_check %q", after.Owned.State, after.Owned.BootBaseline == "", after.Owned.BootCheck)
	}

	journal := len(p.f.inv.JournalOf(12))
	if err := agent.BootCheck(context.Background(), check); err != nil {
		t.Fatalf("boot check after the attest, with the files the provision delivered: exit %d: %v", agent.ExitCode(err), err)
	}
	j := p.f.inv.JournalOf(12)
	if len(j) != journal+1 || !strings.Contains(j[journal], "baseline taken") {
		t.Errorf("journal after the check: %q, want one entry: a new baseline taken", j[journal:])
	}
}

// TestProvisionWithoutLAKBlob: evidence without lak_blob or ldevid_private (an agent older than
// fleetd) cannot give the node its boot-check or SPIRE files, so a provision is refused before
// anything is issued, recorded or authorized, and the request stays pending.
func TestProvisionWithoutLAKBlob(t *testing.T) {
	t.Run("refuse/no lak_blob", func(t *testing.T) { provisionWithout(t, false, "lak_blob_missing") })
	t.Run("refuse/no ldevid_private", func(t *testing.T) { provisionWithout(t, true, "ldevid_private_missing") })
}

// provisionWithout runs the agent's exchange by hand, with lak_blob when withBlob and never with
// ldevid_private, and expects the refusal code.
func provisionWithout(t *testing.T, withBlob bool, code string) {
	sim, ch := simulatorBoot(t)
	defer sim.Close()
	d := fleettest.Declared(12, "node-a")
	d.Declared.EKHashes = []string{simulatorEK(t, ch)}
	d.Owned = fleet.Owned{State: fleet.StatePending, Request: "provision-k3f9x2mq", Workflow: "node-a-provision-k3f9x2mq"}
	f := newFleetd(t, catalog(fleet.SecureBootAny), d)

	// The agent's exchange by hand, leaving lak_blob out.
	tpm, err := agent.OpenTPM(ch)
	if err != nil {
		t.Fatal(err)
	}
	defer tpm.Close()
	ekPub, _, err := tpm.EK()
	if err != nil {
		t.Fatal(err)
	}
	ak, err := tpm.NewAK()
	if err != nil {
		t.Fatal(err)
	}
	defer ak.Close(tpm.Attest())
	var chal api.ChallengeResponse
	if status := postJSON(t, f.url+api.PathAttestChallenge, api.ChallengeRequest{Device: "node-a", Request: d.Owned.Request, TPMVersion: "2.0",
		EK: &api.EK{Public: ekPub}, AK: api.NewAKParams(ak.AttestationParameters())}, &chal); status != http.StatusOK {
		t.Fatalf("challenge: status %d", status)
	}
	secret, err := tpm.ActivateCredential(ak, chal.Credential.Attest())
	if err != nil {
		t.Fatal(err)
	}
	pp, err := tpm.AttestPlatform(ak, chal.Nonce, nil)
	if err != nil {
		t.Fatal(err)
	}
	ld, err := tpm.NewLDevID(ak, chal.Nonce)
	if err != nil {
		t.Fatal(err)
	}
	req := api.EvidenceRequest{Device: "node-a", Token: chal.Token, Secret: secret, Platform: api.NewPlatform(pp),
		LDevID: api.NewCertification(ld.Certification), SMBIOS: api.SMBIOS{UUID: machineUUID, Serial: "SN-1"},
		Disks: []api.Disk{{Serial: "S4EWNX0R123456", Path: "/dev/disk/by-id/nvme-Samsung_SSD_980_1TB_S4EWNX0R123456"}}}
	if withBlob {
		if req.LAKBlob, err = ak.Marshal(); err != nil {
			t.Fatal(err)
		}
	}
	var e api.Error
	if status := postJSON(t, f.url+api.PathAttestEvidence, req, &e); status != http.StatusBadRequest || e.Code != code {
		t.Fatalf("evidence: %d %+v, want 400 %s", status, e, code)
	}
	got := f.inv.Get(12)
	if got.Owned.State != fleet.StatePending || got.Owned.LAKSerial != "" || got.Owned.LDevIDSerial != "" {
		t.Errorf("after the refusal: fleet_state %q, serials %q %q; want pending and none", got.Owned.State, got.Owned.LAKSerial, got.Owned.LDevIDSerial)
	}
	if !got.Owned.Identity.Empty() {
		t.Error("fleet_identity was recorded for a refused enrollment")
	}
}
