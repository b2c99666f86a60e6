package stack

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/folly-infra/fleetd/dev/swtpm"
)

// Files of a simulated machine's directory (docs/design.md §8).
const (
	MachineTPMDir = "tpm" // the swtpm state, with its EK certificate
	// MachineWorkflowDir is the shared directory of the Workflow the machine runs: what the agent
	// wrote for the later actions (the Template's shared volume, or v0.12.2's /workflow).
	MachineWorkflowDir = "workflow"
	// MachineContainersDir holds the own directory of an action whose container has no bind onto
	// its FLEETD_WORKFLOW_DIR, while it runs.
	MachineContainersDir = "containers"
	MachineLog           = "log"       // what the simulated actions did
	MachineAgentLog      = "agent.log" // what `fleetd enroll` and `fleetd boot-check` wrote, as they wrote it
	// MachineWorkerLog is the log of the machine's worker (tink-agent, or tink-worker v0.12.2)
	// and its Docker API, while it netboots.
	MachineWorkerLog = "worker.log"
)

// machineTPM is the EK of one device: a manufactured swtpm, or for a declared TPM 1.2 (which
// swtpm does not simulate here) the hash of a fresh RSA-2048 key standing for its EK.
type machineTPM struct {
	machineDir string // "" without a machine
	ekSHA256   string
	uuid       string // SMBIOS UUID
	foreignEK  string // the hash of a key that is not this machine's EK (SeedDevice.ForeignEK)
}

// manufactureParallel bounds concurrent swtpm_setup runs (each takes about a second, mostly
// waiting).
const manufactureParallel = 8

// manufacture makes each device's TPM: a swtpm (docs/design.md §8: RSA-2048 EK at 0x81010001 with its
// certificate from the stack's EK CA) under machines/<name>/tpm for every TPM 2.0 device, so
// that ek_sha256 declares a real EK. It then writes the EK CA bundle (root and issuing CA).
func manufacture(ctx context.Context, p paths, devices []SeedDevice, rnd io.Reader) (map[string]machineTPM, error) {
	var mu sync.Mutex
	out := map[string]machineTPM{}
	put := func(name string, m machineTPM) {
		mu.Lock()
		defer mu.Unlock()
		out[name] = m
	}
	// One failure cancels the others (Manufacture ends a cancelled swtpm_setup's children too).
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(manufactureParallel)
	for i, d := range devices {
		if !d.Machine() {
			h, err := standInEK(rnd)
			if err != nil {
				return nil, err
			}
			put(d.Name, machineTPM{ekSHA256: h})
			continue
		}
		g.Go(func() error {
			m, err := newMachine(ctx, p, d, i, rnd)
			if err == nil && d.ForeignEK {
				m.foreignEK, err = standInEK(rnd)
			}
			if err == nil {
				put(d.Name, m)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := writeEKBundle(p); err != nil {
		return nil, err
	}
	return out, nil
}

// newMachine creates the directory of device d (index i): its hardware files and its TPM.
func newMachine(ctx context.Context, p paths, d SeedDevice, i int, rnd io.Reader) (machineTPM, error) {
	dir := p.machineDir(d.Name)
	if err := os.MkdirAll(filepath.Join(dir, MachineWorkflowDir), 0o700); err != nil {
		return machineTPM{}, fmt.Errorf("create machine %s: %w", d.Name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, MachineLog), nil, 0o600); err != nil {
		return machineTPM{}, fmt.Errorf("create machine %s: %w", d.Name, err)
	}
	uuid, err := newSMBIOSUUID(rnd)
	if err != nil {
		return machineTPM{}, err
	}
	if err := writeMachineFS(dir, uuid, chassisSerial(i), mac(i), machineDisks(d, i)); err != nil {
		return machineTPM{}, fmt.Errorf("create machine %s: %w", d.Name, err)
	}
	tpm, err := swtpm.Manufacture(ctx, filepath.Join(dir, MachineTPMDir), swtpm.Options{CADir: p.ekCA})
	if err != nil {
		return machineTPM{}, fmt.Errorf("create machine %s: %w", d.Name, err)
	}
	return machineTPM{machineDir: dir, ekSHA256: tpm.EKSHA256, uuid: uuid}, nil
}

// writeEKBundle writes ca/ek.pem: the EK CA's issuing CA and root, as stack.json's ca.ek and
// fleetd's attestation.ek_ca_bundle hold them.
func writeEKBundle(p paths) error {
	ca, err := swtpm.ReadEKCA(p.ekCA)
	if err != nil {
		return fmt.Errorf("read the EK CA: %w", err)
	}
	if err := os.WriteFile(p.ekBundle, ca.BundlePEM(), 0o644); err != nil {
		return fmt.Errorf("write the EK CA bundle: %w", err)
	}
	return nil
}

// standInEK is the ek_sha256 of a declared TPM 1.2 machine: the SPKI hash of a fresh RSA-2048
// key, since a TPM 1.2 EK is one too. Nothing ever presents it: such a device is refused first.
func standInEK(rnd io.Reader) (string, error) {
	k, err := rsa.GenerateKey(rnd, 2048)
	if err != nil {
		return "", fmt.Errorf("make a stand-in TPM 1.2 EK: %w", err)
	}
	spki, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return "", fmt.Errorf("make a stand-in TPM 1.2 EK: %w", err)
	}
	sum := sha256.Sum256(spki)
	return hex.EncodeToString(sum[:]), nil
}
