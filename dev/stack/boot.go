package stack

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/render"
)

// nodeDir is fleet.NodeDir under the machine's install disk: where the node keeps the files its
// configuration delivered: lak.pem and lak.blob for `fleetd boot-check`, ldevid.pem, ldevid.pub
// and ldevid.priv for SPIRE's tpm_devid agent.
func (mc *machine) nodeDir() string { return mc.path(MachineDiskDir, fleet.NodeDir) }

// Boot is `fleetsim machine NAME boot` (docs/design.md §8): the installed OS's first boot. It fetches the
// configuration the way its class does, from the machine's own address — Talos its machine
// config (talos.config=…?uuid=…&serial=…&code=…, the code read from its disk's META with Talos's
// own reader; one try, where Talos would retry a non-200 for 3 h),
// a nixos-image or alpine-image node its seed with the fetch secret its install wrote into the
// image, a cloud-init node nothing (its seed was written onto the disk by the install Workflow) —
// and writes the node files the configuration carries into /var/lib/fleetd-node on its disk, as
// the OS does. A Talos node's LDevID files arrive in their text form; the real
// `fleetd boot-check --install-only` installs them, as the init container of the node's SPIRE
// agent pod does (deploy/kubernetes/spire-agent-daemonset.yaml). With the stack's workload
// cluster (Options.WorkloadCluster), a Talos machine's kubelet then joins it with the bootstrap
// token of the config it fetched, as o.Kubelet says (kubelet.go).
func Boot(ctx context.Context, info Info, name string, o StepOptions) error {
	mc, err := openMachine(info, name, "boot", o.Out)
	if err != nil {
		return err
	}
	defer mc.close()
	image, err := os.ReadFile(mc.path(MachineDiskDir, "IMAGE"))
	if err != nil {
		return fmt.Errorf("boot %s: %w: netboot a provision Workflow first", name, ErrNotInstalled)
	}
	mc.say("booting the installed OS (%s)", bytes.TrimSpace(image))
	kind, err := mc.classKind(ctx)
	if err != nil {
		return fmt.Errorf("boot %s: %w", name, err)
	}
	body, err := mc.fetchConfig(ctx, kind)
	if err != nil {
		return fmt.Errorf("boot %s: %w", name, err)
	}
	if kind != fleet.KindCloudInit {
		mc.recordDelivery(kind, body)
	}
	files, err := render.DeliveredFiles(kind, body)
	if err != nil {
		return fmt.Errorf("boot %s: %w", name, err)
	}
	if err := os.MkdirAll(mc.nodeDir(), 0o700); err != nil {
		return err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(mc.nodeDir(), f.Name), f.Data, f.Mode); err != nil {
			return fmt.Errorf("boot %s: write node file %s: %w", name, f.Path(), err)
		}
		mc.say("wrote %s (%d bytes) from its configuration", f.Path(), len(f.Data))
	}
	if kind == fleet.KindTalos {
		cmd := exec.Command(mc.info.Fleetd.Binary, "boot-check", "--install-only", "--dir", mc.nodeDir())
		if out, err := mc.run(ctx, cmd, nil); err != nil {
			return fmt.Errorf("boot %s: fleetd boot-check --install-only: %w: %s", name, err, lastLine(out))
		}
		mc.say("fleetd boot-check --install-only installed the LDevID files from their text form")
		if mc.info.WorkloadCluster != nil {
			if o.Kubelet == KubeletNone {
				mc.say("kubelet: none runs (--kubelet none); its bootstrap token stays unused")
			} else if err := mc.joinCluster(ctx, body, o.Kubelet); err != nil {
				return fmt.Errorf("boot %s: %w", name, err)
			}
		}
	}
	mc.say("%s node up", kind)
	return nil
}

// LDevIDFiles are the LDevID files SPIRE's tpm_devid agent reads, as the installed node holds them
// in /var/lib/fleetd-node after its first boot, by name: nothing for a name it does not hold.
func LDevIDFiles(info Info, name string) (map[string][]byte, error) {
	m, ok := info.Machines[name]
	if !ok {
		return nil, fmt.Errorf("no machine %s in the stack", name)
	}
	out := map[string][]byte{}
	for _, f := range []string{fleet.NodeFileLDevIDCert, fleet.NodeFileLDevIDPub, fleet.NodeFileLDevIDPriv} {
		b, err := os.ReadFile(filepath.Join(m.Dir, MachineDiskDir, fleet.NodeDir, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[f] = b
	}
	return out, nil
}

// classKind is the kind of the device's class, from NetBox and the stack's classes.json.
func (mc *machine) classKind(ctx context.Context) (fleet.Kind, error) {
	d, err := NewOwner(mc.info.NetBox.URL, mc.info.NetBox.Token).Device(ctx, mc.name)
	if err != nil {
		return "", err
	}
	f, err := os.Open(filepath.Join(mc.info.Dir, "classes.json"))
	if err != nil {
		return "", fmt.Errorf("read the stack's classes.json: %w", err)
	}
	defer f.Close()
	cat, err := fleet.LoadCatalog(f)
	if err != nil {
		return "", err
	}
	c, ok := cat.Class(d.Field("fleet_class"))
	if !ok {
		return "", fmt.Errorf("its class %q is not in classes.json", d.Field("fleet_class"))
	}
	return c.Kind, nil
}

// fetchConfig gets the node's configuration as its OS does at first boot.
func (mc *machine) fetchConfig(ctx context.Context, kind fleet.Kind) ([]byte, error) {
	base := mc.info.Fleetd.URL + "/v1/config/"
	uuid, err := MachineUUID(mc.m) // its firmware's, after a new mainboard too
	if err != nil {
		return nil, err
	}
	q := url.Values{"uuid": {uuid}}
	switch kind {
	case fleet.KindTalos:
		q.Set("serial", mc.m.SMBIOSSerial)
		code, err := mc.talosCode(ctx)
		if err != nil {
			return nil, err
		}
		q.Set("code", code)
		body, err := mc.fetch(ctx, base+"talos?"+q.Encode(), "")
		if err != nil {
			return nil, fmt.Errorf("Talos fetched no machine config (it would retry every non-200 for up to 3 h): %w", err)
		}
		return body, mc.keep(talosConfigFile, body)
	case fleet.KindNixOS, fleet.KindAlpine:
		secretFile := mc.path(MachineDiskDir, imageFetchSecret)
		secret, err := readSecret(secretFile)
		if err != nil {
			return nil, fmt.Errorf("the image holds no fetch secret (/%s: %w): its install did not write it", imageFetchSecret, err)
		}
		body, err := mc.fetch(ctx, base+"seed?"+q.Encode(), secret)
		if err != nil {
			return nil, fmt.Errorf("the seed fetch failed: %w", err)
		}
		if err := os.Remove(secretFile); err != nil { // as the first-boot service does once the seed is in
			return nil, err
		}
		return body, mc.keep("fleet-seed.json", body)
	case fleet.KindCloudInit:
		mc.say("cloud-init reads its NoCloud seed from /%s on the disk", nocloudDir)
		return tarDir(mc.path(MachineDiskDir, nocloudDir))
	}
	return nil, fmt.Errorf("class kind %q has no first boot in fleetsim", kind)
}

// talosCode is the value Talos fills its URL's ${code} with: its META key DownloadURLCode, read
// from the installed disk's META by Talos's own reader (Info.TalosMeta), not by fleetd's code.
// Without the key Talos waits 90 s for it, then fetches with ${code} unfilled, which fleetd
// refuses, and again for 3 h; fleetsim says so.
func (mc *machine) talosCode(ctx context.Context) (string, error) {
	disk, err := filepath.EvalSymlinks(mc.devPath("/dev/fleetd-disk"))
	if err != nil {
		return "", fmt.Errorf("the installed disk is unknown (%w): the install selected no disk", err)
	}
	m, err := ReadTalosMeta(ctx, mc.info.TalosMeta, disk)
	if err != nil {
		return "", err
	}
	code, ok := m.Tags[strconv.Itoa(m.DownloadURLCodeTag)]
	if !ok || code == "" {
		return "", errors.New("the disk's META holds no DownloadURLCode, so its install did not write the fetch secret (the talos-meta step): Talos would wait 90 s for ${code}, then fetch with it unfilled, refused 403 wrong_fetch_secret, for 3 h")
	}
	mc.say("read ${code} from the disk's META with Talos's reader")
	return code, nil
}

// TalosMeta is what Talos's META reader (scripts/tools.sh's talos-meta) reports of a disk.
type TalosMeta struct {
	Tags               map[string]string `json:"tags"` // by tag number, in decimal
	Copy1OK            bool              `json:"copy1_ok"`
	Copy2OK            bool              `json:"copy2_ok"`
	DownloadURLCodeTag int               `json:"download_url_code_tag"` // the tag Talos's machinery names DownloadURLCode
}

// ReadTalosMeta reads a disk image's META with Talos's reader, the program at tool.
func ReadTalosMeta(ctx context.Context, tool, disk string) (TalosMeta, error) {
	cmd := exec.CommandContext(ctx, tool, disk)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return TalosMeta{}, fmt.Errorf("Talos's META reader on %s: %w: %s", disk, err, strings.TrimSpace(stderr.String()))
	}
	var m TalosMeta
	if err := json.Unmarshal(out, &m); err != nil {
		return TalosMeta{}, fmt.Errorf("Talos's META reader on %s: %w", disk, err)
	}
	return m, nil
}

// keep stores a fetched configuration on the machine's disk, for a person to read.
func (mc *machine) keep(name string, body []byte) error {
	mc.say("configuration fetched (%d bytes), kept as disk/%s", len(body), name)
	return os.WriteFile(mc.path(MachineDiskDir, name), body, 0o600)
}

// tarDir packs the NoCloud seed files back into the tar fleetd served.
func tarDir(dir string) ([]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("the disk has no NoCloud seed (%w): the install Workflow did not write it", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.Name(), Mode: 0o600, Size: int64(len(b))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), tw.Close()
}

// The errors of a boot or a boot check that say what the machine was, not that the step broke:
// a caller that counts what its steps did (dev/stack/chaos) tells them apart with errors.Is.
var (
	// ErrNotInstalled: a boot found nothing installed on the machine's disk.
	ErrNotInstalled = errors.New("nothing is installed on its disk")
	// ErrNotBooted: a boot check found no node files (no LAK certificate) to check with.
	ErrNotBooted = errors.New("the node is not up")
	// ErrDrift: fleetd accepted the boot check and recorded drift (exit code 6 of `fleetd boot-check`).
	ErrDrift = errors.New("fleetd recorded drift")
)

// BootCheck is `fleetsim machine NAME boot-check` (docs/design.md §8): the running node's hourly check,
// the real `fleetd boot-check` against the machine's swtpm with the node files its
// configuration delivered. A check fleetd accepted as drift is an error (exit code 6 of
// `fleetd boot-check`), as is every refusal.
func BootCheck(ctx context.Context, info Info, name string, o StepOptions) (err error) {
	mc, err := openMachine(info, name, "boot-check", o.Out)
	if err != nil {
		return err
	}
	defer mc.close()
	if _, err := os.Stat(filepath.Join(mc.nodeDir(), fleet.NodeFileLAKCert)); err != nil {
		return fmt.Errorf("boot-check %s: %w: %s", name, ErrNotBooted, mc.noNode())
	}
	tpm, eventLog, err := mc.powerOn(ctx, o.EventLog)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tpm.Stop()) }()
	relayURL, stop, err := mc.relay()
	if err != nil {
		return err
	}
	defer stop()
	cmd := exec.Command(info.Fleetd.Binary, "boot-check", "--fleetd-url", relayURL, "--tpm", tpm.Spec(),
		"--event-log", eventLog, "--dir", mc.nodeDir(), "--ca-file", info.CA.Fleetd, "--retries", "2",
		"--sysfs", mc.path(MachineSysDir), "--devfs", mc.path(MachineDevDir)) // its claims are the machine's, not this host's
	out, err := mc.run(ctx, cmd, nil)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 6:
		mc.say("accepted as drift: %s", summary(out))
		return fmt.Errorf("boot-check %s: %w: %s", name, ErrDrift, summary(out))
	case err != nil:
		mc.say("failed: %s", lastLine(out))
		return fmt.Errorf("boot-check %s: fleetd boot-check: %w: %s", name, err, lastLine(out))
	}
	mc.say("accepted: %s", summary(out))
	return nil
}

func isFailureLine(line string) bool {
	_, ok := failureLine(line)
	return ok
}

// summary is the agent's last log line in words: its message and fleetd's outcome.
func summary(out string) string {
	var l struct {
		Message       string   `json:"message"`
		Outcome       string   `json:"outcome"`
		BaselineTaken bool     `json:"baseline_taken"`
		Changes       []string `json:"changes"`
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	i := len(lines) - 1
	for i >= 0 && (json.Unmarshal([]byte(lines[i]), &l) != nil || l.Message == "" || isFailureLine(lines[i])) {
		i--
	}
	if i < 0 {
		return lastLine(out)
	}
	s := fmt.Sprintf("%s (outcome %s", l.Message, l.Outcome)
	if l.BaselineTaken {
		s += ", baseline taken"
	}
	if n := len(l.Changes); n > 0 {
		s += fmt.Sprintf(", %d changes: %s", n, strings.Join(l.Changes[:min(n, 5)], "; "))
		if n > 5 {
			s += fmt.Sprintf("; and %d more in the machine's log", n-5)
		}
	}
	return s + ")"
}

// noNode says why the machine has no running node to check, and what to do: its disk was erased
// (a wipe or a retirement), nothing was ever installed, or the installed OS has not booted.
func (mc *machine) noNode() string {
	_, errImage := os.Stat(mc.path(MachineDiskDir, "IMAGE"))
	_, errFresh := os.Stat(mc.path(MachineDiskDir, ".simulated-install"))
	switch {
	case errImage == nil:
		return fmt.Sprintf("the installed OS has not booted yet (no %s in its %s): boot it first (fleetsim machine %s boot)", fleet.NodeFileLAKCert, fleet.NodeDir, mc.name)
	case errFresh == nil:
		return fmt.Sprintf("nothing is installed on its disk yet: provision it (desired_action=provision), netboot it, then boot it (fleetsim machine %s boot)", mc.name)
	}
	return "its disk was erased by its last Workflow (a wipe or a retirement), so no node runs there to check; provision it again to install one"
}
