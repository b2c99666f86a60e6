package render_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/render"
)

// readTar reads a tar back with archive/tar: names in order, bodies and headers by name.
func readTar(t *testing.T, b []byte) ([]string, map[string]string, map[string]*tar.Header) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var names []string
	bodies, headers := map[string]string{}, map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("read %s: %v", h.Name, err)
		}
		names = append(names, h.Name)
		bodies[h.Name], headers[h.Name] = string(body), h
	}
	return names, bodies, headers
}

func TestRenderNoCloud(t *testing.T) {
	// An all-digit MAC is the case YAML 1.1 readers misread unless it is quoted.
	d := renderDevice("node-c", "00:11:22:33:44:55", "10.0.0.7/24", "SSD-1")
	r := newTestRenderer(t, nil)
	nc, err := r.Render(d, nocloudClass, renderID)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	if nc.Kind != fleet.KindCloudInit || nc.ContentType != "application/x-tar" {
		t.Errorf("kind %q content type %q", nc.Kind, nc.ContentType)
	}
	names, files, headers := readTar(t, nc.Body)
	if got := strings.Join(names, ","); got != "meta-data,network-config,user-data,vendor-data" {
		t.Fatalf("tar entries %s, want meta-data,network-config,user-data,vendor-data in that order", got)
	}
	for _, n := range names {
		h := headers[n]
		if !h.ModTime.Equal(renderEpoch) || h.Mode != 0o644 || h.Typeflag != tar.TypeReg || h.Uid != 0 {
			t.Errorf("%s: mtime %v mode %o type %c uid %d, want the clock's time, 0644, regular, root", n, h.ModTime, h.Mode, h.Typeflag, h.Uid)
		}
	}

	meta := yamlMap(t, []byte(files["meta-data"]))
	iid, _ := meta["instance-id"].(string)
	if !regexp.MustCompile(`^iid-node-c-[0-9a-f]{16}$`).MatchString(iid) || meta["local-hostname"] != "node-c" {
		t.Errorf("meta-data = %v, want a fresh instance-id and local-hostname node-c", meta)
	}
	if files["user-data"] != nocloudClass.CloudInit.UserData {
		t.Errorf("user-data = %q, want the class's verbatim", files["user-data"])
	}

	net := yamlMap(t, []byte(files["network-config"]))
	want := `{"ethernets":{"nic0":{"addresses":["10.0.0.7/24"],"dhcp4":false,"match":{"macaddress":"00:11:22:33:44:55"},` +
		`"nameservers":{"addresses":["10.0.0.1","9.9.9.9"]},"routes":[{"to":"0.0.0.0/0","via":"10.0.0.1"}],"set-name":"nic0"}},"version":2}`
	if got := mustJSON(t, net); got != want {
		t.Errorf("network-config\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(files["network-config"], `macaddress: "00:11:22:33:44:55"`) {
		t.Errorf("the MAC is not quoted in network-config:\n%s", files["network-config"])
	}
	if !strings.Contains(nc.Summary, "NoCloud seed for node-c (instance-id "+iid+", 10.0.0.7/24 on 00:11:22:33:44:55)") {
		t.Errorf("summary %q", nc.Summary)
	}
}

func TestRenderNoCloudInstanceIDs(t *testing.T) {
	d := renderDevice("node-c", "00:11:22:33:44:55", "10.0.0.7/24", "SSD-1")
	same := func() []byte {
		r := newTestRenderer(t, func(c *render.Config) { c.Random = rand.NewChaCha8([32]byte{9}) })
		nc, err := r.Render(d, nocloudClass, renderID)
		if err != nil {
			t.Fatalf("Render: %v", err)
		}
		return nc.Body
	}
	t.Run("ok/same-inputs-same-bytes", func(t *testing.T) {
		if !bytes.Equal(same(), same()) {
			t.Error("two renders with the same clock and randomness differ")
		}
	})
	t.Run("ok/each-render-a-new-instance-id", func(t *testing.T) {
		r := newTestRenderer(t, nil)
		seen := map[string]bool{}
		for range 3 {
			nc, err := r.Render(d, nocloudClass, renderID)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			_, files, _ := readTar(t, nc.Body)
			iid := yamlMap(t, []byte(files["meta-data"]))["instance-id"].(string)
			if seen[iid] {
				t.Fatalf("instance-id %s repeated: cloud-init would not re-run on the reinstalled node", iid)
			}
			seen[iid] = true
		}
	})
	t.Run("refuse/randomness-fails", func(t *testing.T) {
		r := newTestRenderer(t, func(c *render.Config) { c.Random = strings.NewReader("") })
		_, err := r.Render(d, nocloudClass, renderID)
		if err == nil || errors.Is(err, fleet.ErrConfigRejected) || !strings.Contains(err.Error(), "draw NoCloud instance-id") {
			t.Errorf("Render = %v, want fleetd's own failure to draw an instance-id", err)
		}
	})
}
