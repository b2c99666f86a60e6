package deploy

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// One story across the docs: every path, port and URL the docs name for spore is the
// one the example configuration and the deploy files use, and operator calls go to https.

const credentialDir = "/run/credentials/fleetd.service/"

var (
	spathRE   = regexp.MustCompile(`(?:/etc/fleetd|/var/lib/kea|/run/credentials/fleetd\.service)/[A-Za-z0-9_.-][A-Za-z0-9_./-]*`)
	sporeURLs = regexp.MustCompile(`https?://spore\.lan(?::[0-9]+)?`)
	credRE    = regexp.MustCompile(`(?m)^LoadCredential=([^:]+):`)
)

// exampleConfig is examples/fleetd.yaml: its text and the values the story rests on.
type exampleConfig struct {
	text      string
	publicURL string
	https     string // listen.https
}

func readExampleConfig(t *testing.T) exampleConfig {
	t.Helper()
	text := readFile(t, "../examples/fleetd.yaml")
	var c struct {
		PublicURL string `json:"public_url"`
		Listen    struct {
			HTTPS string `json:"https"`
		} `json:"listen"`
	}
	if err := yaml.Unmarshal([]byte(text), &c); err != nil {
		t.Fatalf("examples/fleetd.yaml: %v", err)
	}
	return exampleConfig{text: text, publicURL: c.PublicURL, https: c.Listen.HTTPS}
}

// docTexts are the README and every docs/*.md, by path.
func docTexts(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("../docs/*.md")
	if err != nil || len(paths) < 5 {
		t.Fatalf("docs/*.md: %v (%d files)", err, len(paths))
	}
	texts := map[string]string{"README.md": readFile(t, "../README.md")}
	for _, p := range paths {
		texts[strings.TrimPrefix(p, "../")] = readFile(t, p)
	}
	return texts
}

// deployTexts are the files under deploy/ that install fleetd (not its tests).
func deployTexts(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") || strings.Contains(p, "testdata") {
			return err
		}
		b.WriteString(readFile(t, p))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// storyProblems returns one line per place where the docs, the example configuration and the
// systemd unit tell different stories.
func storyProblems(cfg exampleConfig, docs map[string]string, deploy, unit string) []string {
	var bad []string
	pub, err := url.Parse(cfg.publicURL)
	if err != nil || pub.Scheme != "https" || pub.Port() == "" {
		bad = append(bad, "examples/fleetd.yaml: public_url "+cfg.publicURL+" is not https://host:port")
	} else if !strings.HasSuffix(cfg.https, ":"+pub.Port()) {
		bad = append(bad, "examples/fleetd.yaml: listen.https "+cfg.https+" is not public_url's port "+pub.Port())
	}
	names := make([]string, 0, len(docs))
	for n := range docs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, u := range sporeURLs.FindAllString(docs[n], -1) {
			if u != cfg.publicURL {
				bad = append(bad, n+": names "+u+"; spore's URL is public_url "+cfg.publicURL+" (operator calls carry the token: https only)")
			}
		}
		for _, p := range spathRE.FindAllString(docs[n], -1) {
			p = strings.TrimRight(p, ".")
			if !strings.Contains(cfg.text, p) && !strings.Contains(deploy, p) {
				bad = append(bad, n+": names "+p+", which neither examples/fleetd.yaml nor deploy/ uses")
			}
		}
	}
	for _, u := range sporeURLs.FindAllString(deploy, -1) {
		if u != cfg.publicURL {
			bad = append(bad, "deploy/: names "+u+"; spore's URL is public_url "+cfg.publicURL)
		}
	}
	// Each credential fleetd.yaml reads is one the unit loads, and each the unit loads is read.
	loaded := map[string]bool{}
	for _, m := range credRE.FindAllStringSubmatch(unit, -1) {
		loaded[m[1]] = true
	}
	used := map[string]bool{}
	for _, p := range spathRE.FindAllString(cfg.text, -1) {
		if name, ok := strings.CutPrefix(p, credentialDir); ok {
			used[name] = true
			if !loaded[name] {
				bad = append(bad, "examples/fleetd.yaml reads "+p+", which deploy/systemd/fleetd.service does not load (LoadCredential="+name+":…)")
			}
		}
	}
	var unused []string
	for name := range loaded {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	slices.Sort(unused)
	for _, name := range unused {
		bad = append(bad, "deploy/systemd/fleetd.service loads the credential "+name+", which examples/fleetd.yaml never reads")
	}
	return bad
}

func TestDocsTellOneStory(t *testing.T) {
	cfg := readExampleConfig(t)
	docs := docTexts(t)
	deploy := deployTexts(t)
	unit := readFile(t, "systemd/fleetd.service")
	if bad := storyProblems(cfg, docs, deploy, unit); len(bad) > 0 {
		t.Errorf("%d place(s) where the docs, examples/fleetd.yaml and deploy/ disagree:\n  %s", len(bad), strings.Join(bad, "\n  "))
	}

	// Each check can fail.
	for _, tc := range []struct {
		name string
		edit func(cfg *exampleConfig, docs map[string]string, unit *string)
		want string
	}{
		{"refuse/plain http for operator calls", func(_ *exampleConfig, d map[string]string, _ *string) {
			d["docs/http.md"] += "\ncurl -H \"Authorization: Bearer $T\" http://spore.lan:8080/v1/devices\n"
		}, "http://spore.lan:8080"},
		{"refuse/another port", func(_ *exampleConfig, d map[string]string, _ *string) {
			d["docs/operate.md"] += "\nhttps://spore.lan:9443/v1/devices\n"
		}, "https://spore.lan:9443"},
		{"refuse/another token path", func(_ *exampleConfig, d map[string]string, _ *string) {
			d["docs/http.md"] += "\nthe token in /run/credentials/fleetd.service/fleetd-operator-token\n"
		}, "fleetd-operator-token"},
		{"refuse/listen port not public_url's", func(c *exampleConfig, _ map[string]string, _ *string) {
			c.https = ":9443"
		}, "listen.https"},
		{"refuse/credential not loaded", func(_ *exampleConfig, _ map[string]string, u *string) {
			*u = strings.Replace(*u, "LoadCredential=operator-token:", "LoadCredential=operator-tokn:", 1)
		}, "does not load (LoadCredential=operator-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, u := cfg, unit
			d := map[string]string{}
			for k, v := range docs {
				d[k] = v
			}
			tc.edit(&c, d, &u)
			bad := strings.Join(storyProblems(c, d, deploy, u), "\n")
			if !strings.Contains(bad, tc.want) {
				t.Errorf("the check does not find %q; it found:\n%s", tc.want, bad)
			}
		})
	}
}
