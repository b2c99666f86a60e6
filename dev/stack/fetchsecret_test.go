package stack_test

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/dev/stack"
)

// TestFetchSecret: a seed image's configuration is served only with the one-time fetch secret
// the attested exchange handed the agent and the install wrote into the image (docs/security.md, "The configuration fetch"): a
// fetch from the machine's own address with its attested UUID but without the secret, or with
// another, is refused 403 and consumes nothing; the machine's own first boot then fetches it;
// the same secret again is 410. Neither the UUID nor the secret is in NetBox's journal or
// fleet_message, and the Workflow's directory keeps no secret after the install.
func TestFetchSecret(t *testing.T) {
	needStack(t)
	const name = "fetch-secret"
	installed(t, name)
	m := testStack.Info().Machines[name]
	if _, err := os.Stat(filepath.Join(m.Dir, "workflow", "fetch-secret")); err == nil {
		t.Errorf("the Workflow's directory still holds the fetch secret after the install wrote it into the image")
	}
	b, err := os.ReadFile(filepath.Join(m.Dir, "disk", "var", "lib", "fleetd-node", "fetch-secret"))
	if err != nil {
		t.Fatalf("the install wrote no fetch secret into the image: %v", err)
	}
	secret := strings.TrimSpace(string(b))
	path := configPath(name, "seed")
	for _, tc := range []struct {
		name, secret, error string
	}{
		{"refuse/no-fetch-secret", "", "fetch_secret_missing"},
		{"refuse/another-fetch-secret", strings.Repeat("A", len(secret)), "wrong_fetch_secret"},
	} {
		if code, body := fetchWithSecret(t, name, path, tc.secret); code != http.StatusForbidden || !strings.Contains(body, `"`+tc.error+`"`) {
			t.Errorf("%s: %d %s, want 403 %s", tc.name, code, body, tc.error)
		}
	}
	if d := device(t, name); d.Field("fleet_state") != "configuring" {
		t.Fatalf("after the refused fetches fleet_state is %q, want configuring: a refusal consumed the configuration", d.Field("fleet_state"))
	}
	if err := step(t, stack.Boot, name, stack.StepOptions{}); err != nil {
		t.Fatalf("ok/the-machine-itself after the refusals: %v", err)
	}
	d := waitState(t, name, "active")
	if code, body := fetchWithSecret(t, name, path, secret); code != http.StatusGone || !strings.Contains(body, `"config_delivered"`) {
		t.Errorf("refuse/replay-after-delivery: %d %s, want 410 config_delivered", code, body)
	}
	written := []string{d.Field("fleet_message")}
	for _, j := range journal(t, name) {
		written = append(written, j.Comments)
	}
	for _, w := range written {
		if strings.Contains(strings.ToLower(w), strings.ToLower(m.SMBIOSUUID)) || strings.Contains(w, secret) {
			t.Errorf("NetBox holds the SMBIOS UUID or the fetch secret: %q", w)
		}
	}
}

// TestTalosFetchSecret: a Talos machine's configuration is served only with the fetch secret the
// attested exchange handed the agent, which the install's talos-meta step wrote into the disk's
// META as DownloadURLCode, read here with Talos's own reader (Talos v1.11.5's code) as Talos
// reads it for its URL's ${code}: every other key as the image left it (none), both copies
// checking. A fetch with the attested UUID from the machine's address but without code=, or with
// another, is refused 403 and consumes nothing; so is the seed route, 404 wrong_kind even with
// the secret; the machine's own first boot (code from META) then fetches; the same code again is
// 410. The Workflow's directory keeps no secret, and NetBox holds neither it nor the UUID.
func TestTalosFetchSecret(t *testing.T) {
	needStack(t)
	const name = "fetch-secret-talos"
	installed(t, name)
	m := testStack.Info().Machines[name]
	if _, err := os.Stat(filepath.Join(m.Dir, "workflow", "fetch-secret")); err == nil {
		t.Errorf("the Workflow's directory still holds the fetch secret after the install wrote it into META")
	}
	disk, err := filepath.EvalSymlinks(filepath.Join(m.Dir, "dev", "fleetd-disk"))
	if err != nil {
		t.Fatal(err)
	}
	meta, err := stack.ReadTalosMeta(tctx(t), testStack.Info().TalosMeta, disk)
	if err != nil {
		t.Fatal(err)
	}
	secret := meta.Tags[strconv.Itoa(meta.DownloadURLCodeTag)]
	if !meta.Copy1OK || !meta.Copy2OK || len(meta.Tags) != 1 || len(secret) != 43 {
		t.Fatalf("Talos reads the installed disk's META as %+v, want both copies checking and one key, DownloadURLCode, the 43-character secret", meta)
	}
	talos := configPath(name, "talos")
	for _, tc := range []struct {
		name, path, header string
		status             int
		error              string
	}{
		{"refuse/no-code", talos, "", http.StatusForbidden, "fetch_secret_missing"},
		{"refuse/another-code", talos + "&code=" + strings.Repeat("A", len(secret)), "", http.StatusForbidden, "wrong_fetch_secret"},
		{"refuse/another-kind", configPath(name, "seed"), secret, http.StatusNotFound, "wrong_kind"},
	} {
		if code, body := fetchWithSecret(t, name, tc.path, tc.header); code != tc.status || !strings.Contains(body, `"`+tc.error+`"`) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, code, body, tc.status, tc.error)
		}
	}
	if d := device(t, name); d.Field("fleet_state") != "configuring" {
		t.Fatalf("after the refused fetches fleet_state is %q, want configuring: a refusal consumed the configuration", d.Field("fleet_state"))
	}
	if err := step(t, stack.Boot, name, stack.StepOptions{}); err != nil {
		t.Fatalf("ok/the-machine-itself after the refusals: %v", err)
	}
	d := waitState(t, name, "active")
	if code, body := fetchWithSecret(t, name, talos+"&code="+secret, ""); code != http.StatusGone || !strings.Contains(body, `"config_delivered"`) {
		t.Errorf("refuse/replay-after-delivery: %d %s, want 410 config_delivered", code, body)
	}
	written := []string{d.Field("fleet_message")}
	for _, j := range journal(t, name) {
		written = append(written, j.Comments)
	}
	for _, w := range written {
		if strings.Contains(strings.ToLower(w), strings.ToLower(m.SMBIOSUUID)) || strings.Contains(w, secret) {
			t.Errorf("NetBox holds the SMBIOS UUID or the fetch secret: %q", w)
		}
	}
}

// fetchWithSecret GETs a configuration path from the machine's own address over TLS, with the
// fetch secret in its header when one is given.
func fetchWithSecret(t testing.TB, name, path, secret string) (int, string) {
	t.Helper()
	tlsCfg, err := stack.FleetdTLS(testStack.Info())
	if err != nil {
		t.Fatal(err)
	}
	from := strings.SplitN(testStack.Info().Machines[name].Address, "/", 2)[0]
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, TLSClientConfig: tlsCfg}, Timeout: deadline}
	req, err := http.NewRequestWithContext(tctx(t), http.MethodGet, testStack.Info().Fleetd.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set(api.HeaderFetchSecret, secret)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
