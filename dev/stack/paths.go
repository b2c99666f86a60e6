package stack

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/folly-infra/fleetd/netbox"
)

// markerFile marks a directory as a fleetsim state directory, which Start may empty.
const markerFile = ".fleetsim"

// paths are the files of a state directory (all absolute).
type paths struct {
	dir string

	secrets, netboxToken, adminToken, webhookSecret, operatorToken, metricsToken, tokenKey, sealKey, talosSecrets string

	bootPolicy string

	ca, ldevidCert, ldevidKey, lakCert, lakKey, ekBundle, ekCA string

	fleetdCA, fleetdTLSCert, fleetdTLSKey string

	fleetdConfig, classes, webhooks, fleetdPID, fleetdLog, keaReservations string

	kube, kubeconfig, machines string
}

func newPaths(dir string) paths {
	j := func(p ...string) string { return filepath.Join(append([]string{dir}, p...)...) }
	return paths{dir: dir,
		secrets: j("secrets"), netboxToken: j("secrets", "netbox-token"), adminToken: j("secrets", "netbox-admin-token"),
		webhookSecret: j("secrets", "webhook-secret"), operatorToken: j("secrets", "operator-token"), metricsToken: j("secrets", "metrics-token"),
		tokenKey: j("secrets", "attestation-token-key"), sealKey: j("secrets", "seal-stack"), talosSecrets: j("secrets", "talos-secrets.yaml"), bootPolicy: j("boot-policy.json"),
		ca: j("ca"), ldevidCert: j("ca", "ldevid.pem"), ldevidKey: j("ca", "ldevid.key"),
		lakCert: j("ca", "lak.pem"), lakKey: j("ca", "lak.key"), ekBundle: j("ca", "ek.pem"), ekCA: j("ekca"),
		fleetdCA: j("ca", "fleetd.pem"), fleetdTLSCert: j("secrets", "fleetd-tls.pem"), fleetdTLSKey: j("secrets", "fleetd-tls.key"),
		fleetdConfig: j("fleetd.yaml"), classes: j("classes.json"), webhooks: j("netbox-webhooks.yaml"),
		fleetdPID: j("fleetd.pid"), fleetdLog: j("fleetd.log"), keaReservations: j("kea", "reservations.json"),
		kube: j("kube"), kubeconfig: j("kubeconfig"), machines: j("machines"),
	}
}

// instanceFiles are fleetd instance k's pid file and log (1-based): fleetd.pid and fleetd.log
// for the first, fleetd-<k>.pid and fleetd-<k>.log for the others.
func (p paths) instanceFiles(k int) (pid, log string) {
	if k == 1 {
		return p.fleetdPID, p.fleetdLog
	}
	return filepath.Join(p.dir, fmt.Sprintf("fleetd-%d.pid", k)), filepath.Join(p.dir, fmt.Sprintf("fleetd-%d.log", k))
}

// machineDir is a simulated machine's directory: tpm/, workflow/ and log (docs/design.md §8).
func (p paths) machineDir(name string) string { return filepath.Join(p.machines, name) }

// prepare empties the state directory (every start is fresh), creates its subdirectories and
// returns the marker file, locked for as long as the stack runs. A directory that is neither
// empty nor an earlier stack's is refused, so a mistyped FLEETSIM_DIR never deletes someone's
// files, and so is the directory of a stack that still runs.
func (p paths) prepare() (*os.File, error) {
	marker := filepath.Join(p.dir, markerFile)
	entries, err := os.ReadDir(p.dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("prepare state dir: %w", err)
	case len(entries) > 0:
		f, err := os.Open(marker)
		if err != nil {
			return nil, fmt.Errorf("prepare state dir: %s is not empty and holds no %s marker, so it is not an earlier stack's state; choose another FLEETSIM_DIR or empty it yourself", p.dir, markerFile)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("prepare state dir: a stack still runs in %s (its marker is locked: %w); stop it or choose another FLEETSIM_DIR", p.dir, err)
		}
		if err := os.RemoveAll(p.dir); err != nil {
			return nil, fmt.Errorf("prepare state dir: remove the earlier state: %w", err)
		}
	}
	for _, d := range []string{p.dir, p.secrets, p.ca, filepath.Dir(p.keaReservations), p.machines} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("prepare state dir: %w", err)
		}
	}
	f, err := os.OpenFile(marker, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("prepare state dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("prepare state dir: lock %s: %w", marker, err)
	}
	if _, err := f.WriteString("fleetsim state directory: `fleetsim up` empties it on start and locks this file while it runs\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("prepare state dir: %w", err)
	}
	return f, nil
}

// FindRoot walks up from dir to the fleetd module's root (the directory whose go.mod declares
// github.com/folly-infra/fleetd).
func FindRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("find the fleetd checkout: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/folly-infra/fleetd\n")) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("find the fleetd checkout: no go.mod of github.com/folly-infra/fleetd above %s; run from the checkout or name it (--root)", dir)
		}
		d = parent
	}
}

// BuildFleetd builds the production binary from the checkout that holds dir, the way `make build`
// does (static, no cgo), into outDir/fleetd, for the tests that run a stack on it.
func BuildFleetd(dir, outDir string) (string, error) {
	root, err := FindRoot(dir)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(outDir, "fleetd")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build fleetd: %w\n%s", err, out)
	}
	return bin, nil
}

// loadSchema reads netbox-webhooks.yaml from the checkout, checks it strictly (as `fleetd check`
// does: fleetd will refuse to start on a file it refuses) and keeps a copy in the state
// directory, which fleetd's webhooks_file names. It returns the file as read, for the NetBox
// emulator, which reads it itself.
func loadSchema(root string, p paths) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(root, "netbox-webhooks.yaml"))
	if err != nil {
		return nil, fmt.Errorf("read netbox-webhooks.yaml from the checkout: %w", err)
	}
	if _, err := netbox.LoadSchema(bytes.NewReader(b)); err != nil {
		return nil, fmt.Errorf("load netbox-webhooks.yaml: %w", err)
	}
	if err := os.WriteFile(p.webhooks, b, 0o644); err != nil {
		return nil, fmt.Errorf("copy netbox-webhooks.yaml into the state dir: %w", err)
	}
	return b, nil
}

// freeLoopbackURL picks a free port on 127.0.0.1 for one of fleetd's listeners, which binds it
// itself, and returns its URL with scheme. The port stays the same across fleetd restarts,
// because NetBox's webhooks and the Workflows' fleetd_url point at it, so it is drawn below the
// kernel's ephemeral range (ip_local_port_range): a port from that range could be taken while
// fleetd restarts by any outgoing connection or ":0" listener (a swtpm's, a keep-alive client's)
// and hold fleetd off it for as long as that lives (a runbook test's fleetd failed to bind for ten
// minutes so). Another process could still take the port in the window before fleetd binds it.
func freeLoopbackURL(scheme string) (string, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > reservedBelow+1000 {
				low = n
			}
		}
	}
	for range 200 {
		port := reservedBelow + rand.IntN(low-reservedBelow)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return scheme + "://" + l.Addr().String(), nil
	}
	return "", fmt.Errorf("pick a port for fleetd: no free port on 127.0.0.1 between %d and %d after 200 tries", reservedBelow, low)
}

// reservedBelow is the lowest port freeLoopbackURL draws: ports below it are left to services.
const reservedBelow = 20000
