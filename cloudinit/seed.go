package cloudinit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Seed is what cloud-init's NoCloud datasource read from a seed directory: the meta-data as
// cloud-init has it (with the dsmode it adds), the raw user-data and vendor-data, and the network
// config it will apply.
type Seed struct {
	OK            bool           `json:"ok"`
	MetaData      map[string]any `json:"metadata"`
	UserData      string         `json:"userdata"`
	VendorData    string         `json:"vendordata"`
	NetworkConfig map[string]any `json:"network"`
	Source        string         `json:"source"`
}

// readSeed is cloud-init 22.4's own NoCloud datasource (cloudinit/sources/DataSourceNoCloud.py)
// run over <cloud_dir>/seed/nocloud, where the install Workflow extracts fleetd's tar on the
// node (/var/lib/cloud/seed/nocloud/ with cloud_dir /var/lib/cloud).
const readSeed = `
import json, sys
from cloudinit import helpers, distros
from cloudinit.sources import DataSourceNoCloud
root = sys.argv[1]
paths = helpers.Paths({"cloud_dir": root, "run_dir": root + "/run"})
distro = distros.fetch("ubuntu")("ubuntu", {}, paths)
ds = DataSourceNoCloud.DataSourceNoCloud({"datasource": {"NoCloud": {}}}, distro, paths)
ok = ds.get_data()
s = lambda b: b.decode() if isinstance(b, bytes) else (b or "")
print(json.dumps({"ok": bool(ok), "metadata": ds.metadata, "userdata": s(ds.userdata_raw),
    "vendordata": s(ds.vendordata_raw), "network": ds.network_config, "source": ds.subplatform}, default=str))
`

// ReadSeed runs cloud-init's NoCloud datasource over cloudDir/seed/nocloud with the Python
// interpreter cloud-init itself runs under, and returns what it read.
func ReadSeed(ctx context.Context, cloudDir string) (Seed, error) {
	var seed Seed
	py, err := interpreter()
	if err != nil {
		return seed, err
	}
	if _, err := os.Stat(filepath.Join(cloudDir, "seed", "nocloud")); err != nil {
		return seed, fmt.Errorf("read NoCloud seed: %w", err)
	}
	out, err := runProgram(ctx, py, "-c", readSeed, cloudDir)
	if err != nil {
		return seed, fmt.Errorf("cloud-init's NoCloud datasource: %w: %s", err, strings.TrimSpace(out))
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &seed); err != nil {
		return seed, fmt.Errorf("cloud-init's NoCloud datasource answered %q: %w", out, err)
	}
	return seed, nil
}

// interpreter is the Python of cloud-init's own #! line (not whatever python3 comes first on
// PATH, which may lack the cloudinit module).
func interpreter() (string, error) {
	bin, err := Binary()
	if err != nil {
		return "", err
	}
	f, err := os.Open(bin)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", bin, err)
	}
	defer f.Close()
	first, err := bufio.NewReader(f).ReadString('\n')
	shebang, ok := strings.CutPrefix(strings.TrimSpace(first), "#!")
	if err != nil || !ok || strings.TrimSpace(shebang) == "" {
		return "", fmt.Errorf("%s has no #! line naming its Python", bin)
	}
	return strings.Fields(shebang)[0], nil
}
