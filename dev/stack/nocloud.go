package stack

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
)

// nocloudDir is where cloud-init reads a NoCloud seed from on the installed root filesystem.
const nocloudDir = "var/lib/cloud/seed/nocloud"

// writeNoCloudSeed does what the Template's write-nocloud-seed script does, with the machine's
// disk/ directory standing for the mounted root partition: it finds the partition ROOT_PARTITION
// of the disk wipe-disk selected, reads the SMBIOS UUID from sysfs (lowercased, as the agent
// reports it), fetches the NoCloud tar once from fleetd from the machine's own address, checks
// its members, and extracts it into /var/lib/cloud/seed/nocloud.
func (mc *machine) writeNoCloudSeed(ctx context.Context, wf *tinkv1.Workflow, a tinkerbell.Action) (string, error) {
	disk, err := filepath.EvalSymlinks(mc.devPath("/dev/fleetd-disk"))
	if err != nil {
		return "", errors.New("/dev/fleetd-disk is missing: wipe-disk did not select the disk")
	}
	dev := filepath.Base(disk)
	part := fmt.Sprintf("%s%s", dev, a.Env["ROOT_PARTITION"])
	if b, err := os.ReadFile(mc.path(MachineSysDir, "block", dev, part, "partition")); err != nil || strings.TrimSpace(string(b)) != a.Env["ROOT_PARTITION"] {
		return "", fmt.Errorf("partition %s of /dev/%s did not appear after the image was written", a.Env["ROOT_PARTITION"], dev)
	}
	b, err := os.ReadFile(mc.path(MachineSysDir, "class/dmi/id/product_uuid"))
	if err != nil {
		return "", errors.New("/sys/class/dmi/id/product_uuid is unreadable: the SMBIOS UUID fleetd attested cannot be read")
	}
	uuid := strings.ToLower(strings.TrimSpace(string(b)))
	u := a.Env["FLEETD_URL"] + "/v1/config/nocloud.tar?uuid=" + url.QueryEscape(uuid)
	body, err := mc.fetch(ctx, u)
	if err != nil {
		return "", err
	}
	dir := mc.path(MachineDiskDir, nocloudDir)
	mc.record(RecordNoCloud, wf, a, "disk", mc.workflowDisk(), "target", "/dev/"+dev, "partition", part, "serial", mc.blockSerial(dev))
	names, err := extractSeed(body, dir)
	if err != nil {
		return "", fmt.Errorf("the seed tar from %s: %w", u, err)
	}
	return fmt.Sprintf("wrote the NoCloud seed (%s) to /%s on /dev/%s", strings.Join(names, ", "), nocloudDir, part), nil
}

// fetch GETs a URL from the machine's address and returns the body of a 200 answer.
func (mc *machine) fetch(ctx context.Context, u string) ([]byte, error) {
	c, err := mc.httpClient()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	from := strings.SplitN(mc.m.Address, "/", 2)[0]
	mc.say("GET %s from %s: %s", u, from, resp.Status)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s from %s: %s: %s", u, from, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

// extractSeed extracts a NoCloud tar into dir, refusing members other than the NoCloud files,
// and requires meta-data and user-data, as the Template does.
func extractSeed(body []byte, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tr := tar.NewReader(bytes.NewReader(body))
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		switch h.Name {
		case "meta-data", "user-data", "network-config", "vendor-data":
		default:
			return nil, fmt.Errorf("it holds %q; only meta-data, user-data, network-config and vendor-data belong there", h.Name)
		}
		b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", h.Name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, h.Name), b, 0o600); err != nil {
			return nil, err
		}
		names = append(names, h.Name)
	}
	for _, need := range []string{"meta-data", "user-data"} {
		if fi, err := os.Stat(filepath.Join(dir, need)); err != nil || fi.Size() == 0 {
			return nil, fmt.Errorf("it lacks %s; cloud-init would skip the seed", need)
		}
	}
	return names, nil
}
