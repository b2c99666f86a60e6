package stack

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
)

// InfoFile is the name of the stack description in the state directory (docs/design.md §8).
const InfoFile = "stack.json"

// Info is stack.json: everything a person, a test or a runbook needs to use the running stack
// (docs/design.md §8). The keys docs/design.md names are netbox, fleetd (url, operator_token), webhook_secret,
// kubeconfig, namespace, ca (ldevid, lak, ek) and machines (dir); the others are additions.
// URLs carry scheme and port; every path is absolute. The file holds secrets and is mode 0600.
type Info struct {
	Dir           string             `json:"dir"`
	NetBox        NetBoxInfo         `json:"netbox"`
	Fleetd        FleetdInfo         `json:"fleetd"`
	WebhookSecret string             `json:"webhook_secret"`
	Kubeconfig    string             `json:"kubeconfig"`
	Namespace     string             `json:"namespace"`
	Kubernetes    KubernetesInfo     `json:"kubernetes"`
	Tinkerbell    TinkerbellInfo     `json:"tinkerbell"`
	CA            CAInfo             `json:"ca"`
	Machines      map[string]Machine `json:"machines"`
	Devices       []DeviceInfo       `json:"devices"`
	// TalosMeta is Talos's own META reader (scripts/tools.sh's talos-meta, built from Talos's
	// module): a Talos machine's first boot reads its disk's META with it, as Talos does, for
	// the ${code} of its configuration URL.
	TalosMeta string `json:"talos_meta"`
	// WorkloadCluster is the cluster the Talos machines join (Options.WorkloadCluster); absent
	// without one.
	WorkloadCluster *WorkloadClusterInfo `json:"workload_cluster,omitempty"`
}

// TinkerbellInfo is the stack's Tinkerbell (Version: v0.25.0 by default, v0.12.2 in make
// test-compat): its controller and server run with the stack (one `tinkerbell` process with
// v0.25, whose log is both ControllerLog and ServerLog; tink-controller and tink-server with
// v0.12.2); a machine's worker (Worker, the binary: tink-agent, or tink-worker) runs only while
// it netboots, against Server (the server's plain gRPC address on loopback).
type TinkerbellInfo struct {
	Version       string `json:"version"`
	Server        string `json:"server"`
	ServerLog     string `json:"server_log"`
	ControllerLog string `json:"controller_log"`
	Worker        string `json:"worker"`
}

// version is the Tinkerbell version the stack runs (stack.json of an older fleetsim names none:
// v0.12.2).
func (t TinkerbellInfo) version() tinkerbell.Version {
	if t.Version == "" {
		return tinkerbell.V012
	}
	return tinkerbell.Version(t.Version)
}

// NetBoxInfo is the NetBox emulator. Token is the owner's (user admin), so whoever reads it acts
// as the owner; fleetd has its own token (user fleetd) in ServiceTokenFile.
type NetBoxInfo struct {
	URL              string `json:"url"`
	Token            string `json:"token"`
	ServiceTokenFile string `json:"service_token_file"`
}

// FleetdInfo is the supervised fleetd. URL is its https listener (public_url: every route, and
// the only one serving node routes; its certificate is issued by stack.json's ca.fleetd);
// HTTPURL its plain listener, where NetBox's webhooks arrive and node routes answer 403
// tls_required. With several instances (Options.FleetdInstances) both are the stack's front,
// which hands each connection to one instance in turn; Instances lists each process, and
// PIDFile and Log are the first instance's.
type FleetdInfo struct {
	URL           string `json:"url"`
	HTTPURL       string `json:"http_url"`
	OperatorToken string `json:"operator_token"`
	// MetricsToken is the bearer token of GET /metrics/devices (the per-device series).
	MetricsToken string `json:"metrics_token"`
	Config       string `json:"config"`
	PIDFile      string `json:"pid_file"`
	Log          string `json:"log"`
	Binary       string `json:"binary"`
	// CertLifetime is the LDevID and LAK lifetime fleetd issues with (Options.CertLifetime).
	CertLifetime time.Duration `json:"cert_lifetime"`
	// Instances are the `fleetd serve` processes, in order (instance 1 first): one, whose
	// listeners are URL and HTTPURL, or several behind the front, each with listeners, a pid
	// file and a log of its own.
	Instances []FleetdInstance `json:"instances"`
}

// FleetdInstance is one supervised `fleetd serve` process of the stack.
type FleetdInstance struct {
	URL     string `json:"url"`      // its own https listener
	HTTPURL string `json:"http_url"` // its own plain listener
	PIDFile string `json:"pid_file"`
	Log     string `json:"log"`
	// DebugURL is its debug listener's (Go's profiles under /debug/pprof/), with
	// Options.DebugListen; "" without.
	DebugURL string `json:"debug_url,omitempty"`
}

// instances is Instances, or the one process a stack.json without the key describes.
func (f FleetdInfo) instances() []FleetdInstance {
	if len(f.Instances) > 0 {
		return f.Instances
	}
	return []FleetdInstance{{URL: f.URL, HTTPURL: f.HTTPURL, PIDFile: f.PIDFile, Log: f.Log}}
}

// instance is instance k (1-based), or an error naming how many there are.
func (f FleetdInfo) instance(k int) (FleetdInstance, error) {
	all := f.instances()
	if k < 1 || k > len(all) {
		return FleetdInstance{}, fmt.Errorf("fleetd instance %d: the stack runs %d (instances are numbered from 1)", k, len(all))
	}
	return all[k-1], nil
}

// KubernetesInfo is the API server with the Tinkerbell CRDs.
type KubernetesInfo struct {
	URL string `json:"url"`
	Dir string `json:"dir"`
}

// CAInfo names the PEM bundles a verifier needs: ldevid and lak hold the issuing CA then its
// root; ek holds the EK manufacturer root and the CA that issued the swtpm EK certificates;
// fleetd the CA of fleetd's TLS certificate (what agents get as FLEETD_CA_FILE).
type CAInfo struct {
	LDevID string `json:"ldevid"`
	LAK    string `json:"lak"`
	EK     string `json:"ek"`
	Fleetd string `json:"fleetd"`
}

// Machine is one simulated machine: Dir holds tpm/, workflow/ and log (docs/design.md §8), and its
// hardware as files (sys/, dev/) and its install disk's content (disk/). The other keys say what
// the machine is: its NetBox device, MAC, address (the source of its requests), the serial of
// its install disk, its EK's hash, and its SMBIOS identity.
type Machine struct {
	Dir          string `json:"dir"`
	DeviceID     int64  `json:"device_id"`
	MAC          string `json:"mac"`
	Address      string `json:"address"`
	DiskSerial   string `json:"disk_serial"`
	EKSHA256     string `json:"ek_sha256"`
	SMBIOSUUID   string `json:"smbios_uuid"`
	SMBIOSSerial string `json:"smbios_serial"`
}

// DeviceInfo is one seeded NetBox device and what is wrong with its declaration, if anything.
type DeviceInfo struct {
	Name    string `json:"name"`
	ID      int64  `json:"id"`
	Class   string `json:"class"`
	MAC     string `json:"mac,omitempty"`
	Address string `json:"address"`
	Faulty  string `json:"faulty,omitempty"`
}

// WriteInfo writes stack.json into info.Dir (mode 0600), atomically.
func WriteInfo(info Info) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", InfoFile, err)
	}
	return writeFileAtomic(filepath.Join(info.Dir, InfoFile), append(b, '\n'), 0o600)
}

// ReadInfo reads dir/stack.json, as the fleetsim commands do while `fleetsim up` runs.
func ReadInfo(dir string) (Info, error) {
	var info Info
	b, err := os.ReadFile(filepath.Join(dir, InfoFile))
	if errors.Is(err, os.ErrNotExist) {
		return info, fmt.Errorf("read stack description: %s has no %s: start the stack with `fleetsim up` (FLEETSIM_DIR=%s) and wait until it says it is ready", dir, InfoFile, dir)
	}
	if err != nil {
		return info, fmt.Errorf("read stack description: %w", err)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("decode %s: %w", filepath.Join(dir, InfoFile), err)
	}
	if !running(dir) {
		return info, fmt.Errorf("the development stack of %s is not running (its %s is from a stack that stopped, and nothing answers at %s): start it with `make run` (or `fleetsim up`, FLEETSIM_DIR=%s) and wait until it says it is ready", dir, InfoFile, info.Fleetd.URL, dir)
	}
	return info, nil
}

// running reports whether a stack runs in dir: `fleetsim up` holds the lock of the state
// directory's marker for as long as it runs (paths.prepare), so a lock this process can take is
// one nobody holds.
func running(dir string) bool {
	f, err := os.Open(filepath.Join(dir, markerFile))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true // held: the stack runs
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// PrintInfo says in words where everything listens and how to use it.
func PrintInfo(w io.Writer, info Info) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("fleetsim is ready (state in %s; %s describes it).", info.Dir, filepath.Join(info.Dir, InfoFile))
	p("")
	p("  NetBox emulator   %s   owner token: %s", info.NetBox.URL, info.NetBox.Token)
	p("  fleetd            %s   (TLS, CA %s; plain HTTP for NetBox's webhooks at %s)", info.Fleetd.URL, info.CA.Fleetd, info.Fleetd.HTTPURL)
	if all := info.Fleetd.instances(); len(all) > 1 {
		p("                    %d instances behind that front (it keeps each client's source address):", len(all))
		for k, in := range all {
			p("                    %d: %s and %s, pid file %s, log %s", k+1, in.URL, in.HTTPURL, in.PIDFile, in.Log)
		}
	} else {
		p("                    pid file %s, log %s", info.Fleetd.PIDFile, info.Fleetd.Log)
	}
	p("  Kubernetes API    %s   kubeconfig %s, namespace %s", info.Kubernetes.URL, info.Kubeconfig, info.Namespace)
	p("  CA bundles        LDevID %s, LAK %s, EK %s", info.CA.LDevID, info.CA.LAK, info.CA.EK)
	p("")
	p("Devices:")
	for _, d := range info.Devices {
		line := fmt.Sprintf("  %-20s id %-4d %-14s %-17s %-13s", d.Name, d.ID, d.Class, d.MAC, d.Address)
		if m, ok := info.Machines[d.Name]; ok {
			line += " machine " + m.Dir
		}
		if d.Faulty != "" {
			line += "  (faulty: " + d.Faulty + ")"
		}
		p("%s", strings.TrimRight(line, " "))
	}
	name, id := exampleDevice(info)
	p("")
	p("Ask for a provision as the owner would:")
	p("  curl -sS -X PATCH -H 'Authorization: Token %s' -H 'Content-Type: application/json' \\", info.NetBox.Token)
	p("       -d '{\"custom_fields\": {\"desired_action\": \"provision\"}}' %s/api/dcim/devices/%d/", info.NetBox.URL, id)
	p("Retire a device (status decommissioning):")
	p("  curl -sS -X PATCH -H 'Authorization: Token %s' -H 'Content-Type: application/json' \\", info.NetBox.Token)
	p("       -d '{\"status\": \"decommissioning\"}' %s/api/dcim/devices/%d/", info.NetBox.URL, id)
	p("What fleetd knows:")
	p("  curl -sS --cacert %s -H 'Authorization: Bearer %s' %s/v1/devices", info.CA.Fleetd, info.Fleetd.OperatorToken, info.Fleetd.URL)
	p("  curl -sS --cacert %s -H 'Authorization: Bearer %s' %s/v1/devices/%s", info.CA.Fleetd, info.Fleetd.OperatorToken, info.Fleetd.URL, name)
	p("Its metrics (fleet-wide to anyone; per device with the metrics token, over https):")
	p("  curl -sS %s/metrics | grep '^fleetd_active_nodes'", info.Fleetd.HTTPURL)
	p("  curl -sS --cacert %s -H 'Authorization: Bearer %s' %s/metrics/devices | grep '%s'", info.CA.Fleetd, info.Fleetd.MetricsToken, info.Fleetd.URL, name)
	p("Journal of the device:")
	p("  curl -sS -H 'Authorization: Token %s' '%s/api/extras/journal-entries/?assigned_object_type=dcim.device&assigned_object_id=%d'", info.NetBox.Token, info.NetBox.URL, id)
	p("Workflows:")
	p("  kubectl --kubeconfig %s -n %s get workflows,hardware", info.Kubeconfig, info.Namespace)
	p("Drive them (FLEETSIM_DIR=%s):", info.Dir)
	p("  fleetsim workflow %s succeed|fail [--action A] [--message M]", name)
	p("  fleetsim machine %s netboot|boot|boot-check", name)
	p("  fleetsim restart fleetd")
	p("")
	p("Stop with Ctrl-C.")
}

// exampleDevice picks the first validly declared device for the printed examples.
func exampleDevice(info Info) (string, int64) {
	for _, d := range info.Devices {
		if d.Faulty == "" {
			return d.Name, d.ID
		}
	}
	return "DEVICE", 0
}

// writeFileAtomic writes data to a temporary file next to path and renames it into place.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
