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

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
)

// nocloudDir is where cloud-init reads a NoCloud seed from on the installed root filesystem.
const nocloudDir = "var/lib/cloud/seed/nocloud"

// writeNoCloudSeed does what the Template's write-nocloud-seed script does, with the machine's
// disk/ directory standing for the mounted root partition: it finds the partition ROOT_PARTITION
// of the disk wipe-disk selected, reads the SMBIOS UUID from sysfs (lowercased, as the agent
// reports it), fetches the NoCloud tar once from fleetd from the machine's own address with the
// agent's fetch secret (then removed), checks its members, and extracts it into
// /var/lib/cloud/seed/nocloud.
func (mc *machine) writeNoCloudSeed(ctx context.Context, wf *tinkerbell.Workflow, a tinkerbell.Action) (string, error) {
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
	secretFile := filepath.Join(a.Env["FLEETD_WORKFLOW_DIR"], a.Env["FLEETD_FETCH_SECRET_FILE"])
	secret, err := readSecret(secretFile)
	if err != nil || a.Env["FLEETD_FETCH_SECRET_FILE"] == "" {
		return "", fmt.Errorf("%s is missing from the action's workflow directory: the fleetd agent handed over no fetch secret (does the Template give every action the request's shared volume?), and fleetd serves the seed only with it", a.Env["FLEETD_FETCH_SECRET_FILE"])
	}
	u := a.Env["FLEETD_URL"] + "/v1/config/nocloud.tar?uuid=" + url.QueryEscape(uuid)
	body, err := mc.fetch(ctx, u, secret)
	if err != nil {
		return "", err
	}
	if err := os.Remove(secretFile); err != nil {
		return "", err
	}
	dir := mc.path(MachineDiskDir, nocloudDir)
	mc.record(RecordNoCloud, wf, a, "disk", mc.workflowDisk(a), "target", "/dev/"+dev, "partition", part, "serial", mc.blockSerial(dev))
	names, err := extractSeed(body, dir)
	if err != nil {
		return "", fmt.Errorf("the seed tar from %s: %w", u, err)
	}
	return fmt.Sprintf("wrote the NoCloud seed (%s) to /%s on /dev/%s", strings.Join(names, ", "), nocloudDir, part), nil
}

// writeFetchSecret does what the seed images' write-fetch-secret action does, with the machine's
// disk/ directory standing for the mounted root partition: it copies the agent's fetch secret
// into the image as /var/lib/fleetd-node/fetch-secret, for the first boot's seed fetch, and
// removes it from the shared directory.
func (mc *machine) writeFetchSecret(a tinkerbell.Action) (string, error) {
	if _, err := filepath.EvalSymlinks(mc.devPath("/dev/fleetd-disk")); err != nil {
		return "", errors.New("/dev/fleetd-disk is missing: wipe-disk did not select the disk")
	}
	src := filepath.Join(a.Env["FLEETD_WORKFLOW_DIR"], a.Env["FLEETD_FETCH_SECRET_FILE"])
	secret, err := readSecret(src)
	if err != nil || a.Env["FLEETD_FETCH_SECRET_FILE"] == "" {
		return "", fmt.Errorf("%s is missing from the action's workflow directory: the fleetd agent handed over no fetch secret (does the Template give every action the request's shared volume?), and fleetd serves the seed only with it", a.Env["FLEETD_FETCH_SECRET_FILE"])
	}
	dst := mc.path(MachineDiskDir, imageFetchSecret)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(dst, []byte(secret+"\n"), 0o600); err != nil {
		return "", err
	}
	if err := os.Remove(src); err != nil {
		return "", err
	}
	return "wrote the fetch secret to /" + imageFetchSecret + " (simulated)", nil
}

// imageFetchSecret is where a seed image keeps the fetch secret for its first boot's fetch.
const imageFetchSecret = "var/lib/fleetd-node/fetch-secret"

// readSecret reads a one-line secret file.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// fetch GETs a URL from the machine's address, with the fetch secret when one is given, and
// returns the body of a 200 answer.
func (mc *machine) fetch(ctx context.Context, u, secret string) ([]byte, error) {
	c, err := mc.httpClient()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if secret != "" {
		req.Header.Set(api.HeaderFetchSecret, secret)
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
