package deploy

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	"sigs.k8s.io/yaml"

	exampletemplates "github.com/folly-infra/fleetd/examples/tinkerbell"
	"github.com/folly-infra/fleetd/workflows"
)

const containerfilePath = "agent/Containerfile"

// agentEntrypoint is the action image's entrypoint: tink-worker passes an action's
// `command` as the container's Cmd, which Docker appends to it.
var agentEntrypoint = []string{"/fleetd", "enroll"}

// instruction is one Containerfile instruction, continuation lines joined.
type instruction struct{ op, args string }

// stages splits a Containerfile into its build stages (each starts with FROM).
func stages(text string) [][]instruction {
	var out [][]instruction
	logical := regexp.MustCompile(`\\\n`).ReplaceAllString(text, " ")
	for _, line := range strings.Split(logical, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		op, args, _ := strings.Cut(line, " ")
		in := instruction{op: strings.ToUpper(op), args: strings.TrimSpace(args)}
		if in.op == "FROM" || len(out) == 0 {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], in)
	}
	return out
}

// checkContainerfile returns what is wrong with the agent image: the final stage must be
// FROM scratch with the static binary, a CA bundle from a named stage, nothing that needs a
// shell, and the exec-form entrypoint `fleetd enroll`.
func checkContainerfile(text string) []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	st := stages(text)
	if len(st) == 0 {
		return []string{"no instruction"}
	}
	final := st[len(st)-1]
	if final[0].op != "FROM" || final[0].args != "scratch" {
		add("the final stage starts with %s %s, want FROM scratch", final[0].op, final[0].args)
	}
	named := map[string]bool{}
	for _, s := range st[:len(st)-1] {
		if f := strings.Fields(s[0].args); len(f) == 3 && strings.EqualFold(f[1], "AS") {
			named[f[2]] = true
		}
	}
	var entry []string
	var binary, certs bool
	for _, in := range final[1:] {
		switch in.op {
		case "RUN", "SHELL", "CMD", "USER":
			add("%s %s in the final stage: the image has no shell and runs the entrypoint as root", in.op, in.args)
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &entry); err != nil {
				add("ENTRYPOINT %s is not the exec form (a JSON array): the shell form needs /bin/sh", in.args)
			}
		case "COPY":
			f := strings.Fields(in.args)
			switch {
			case slices.Equal(f, []string{"fleetd-linux-amd64", "/fleetd"}):
				binary = true
			case len(f) == 3 && strings.HasPrefix(f[0], "--from=") && named[strings.TrimPrefix(f[0], "--from=")] &&
				f[2] == "/etc/ssl/certs/ca-certificates.crt":
				certs = true
			}
		}
	}
	if !binary {
		add("no COPY fleetd-linux-amd64 /fleetd (the release binary, context dist/)")
	}
	if !certs {
		add("no COPY --from=<stage> ... /etc/ssl/certs/ca-certificates.crt: fleetd is reached over TLS")
	}
	if !slices.Equal(entry, agentEntrypoint) {
		add("ENTRYPOINT %q, want %q", entry, agentEntrypoint)
	}
	return bad
}

func TestAgentContainerfile(t *testing.T) {
	base := readFile(t, containerfilePath)
	replace := func(old, new string) string {
		if !strings.Contains(base, old) {
			t.Fatalf("%s has no %q", containerfilePath, old)
		}
		return strings.Replace(base, old, new, 1)
	}
	for _, tc := range []struct{ name, text, want string }{
		{name: "ok/as-shipped", text: base},
		{name: "refuse/shell-form", text: replace(`ENTRYPOINT ["/fleetd", "enroll"]`, "ENTRYPOINT /fleetd enroll"), want: "not the exec form"},
		{name: "refuse/entrypoint-fleetd-only", text: replace(`ENTRYPOINT ["/fleetd", "enroll"]`, `ENTRYPOINT ["/fleetd"]`), want: "ENTRYPOINT"},
		{name: "refuse/alpine-base", text: replace("FROM scratch", "FROM docker.io/library/alpine:3.20"), want: "FROM scratch"},
		{name: "refuse/run", text: replace("COPY fleetd-linux-amd64 /fleetd", "COPY fleetd-linux-amd64 /fleetd\nRUN chmod 0555 /fleetd"), want: "RUN"},
		{name: "refuse/no-ca", text: replace("COPY --from=certs", "COPY --from=nowhere"), want: "ca-certificates"},
		{name: "refuse/arm64-binary", text: replace("COPY fleetd-linux-amd64 /fleetd", "COPY fleetd-linux-arm64 /fleetd"), want: "fleetd-linux-amd64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(checkContainerfile(tc.text), "\n")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("findings:\n%s\nwant one containing %q", got, tc.want)
			}
		})
	}
}

// snippetHardwareMap is a Workflow's hardwareMap, every key fleetd sets (workflows.HardwareMap).
var snippetHardwareMap = map[string]string{
	workflows.MapMAC: "3c:ec:ef:4c:4f:54", workflows.MapDiskSerial: "S6B0NL0T123456", workflows.MapFleetdURL: "https://spore.lan:8443",
	workflows.MapDeviceName: "node-a", workflows.MapDeviceID: "42", workflows.MapRequest: "r-1", workflows.MapAction: "attest",
	workflows.MapImageURL: "https://images.lan/talos.raw.zst", workflows.MapGlobalTimeout: "1800",
}

// checkAgentActions renders a Template as each Tinkerbell version's controller would, applies
// fleetd's own Template check for it, and checks that each agent action (FLEETD_ACTION=enroll) runs `fleetd enroll` with flags
// only: the image's entrypoint already names the subcommand.
func checkAgentActions(manifest []byte) error {
	var tpl tinkv1.Template
	if err := yaml.UnmarshalStrict(manifest, &tpl); err != nil {
		return fmt.Errorf("decode Template: %w", err)
	}
	if tpl.Spec.Data == nil {
		return fmt.Errorf("Template %s has no spec.data", tpl.Name)
	}
	var r workflows.Rendered
	for _, v := range workflows.Versions {
		var err error
		if r, err = workflows.RenderTemplate(v, *tpl.Spec.Data, snippetHardwareMap, nil); err != nil {
			return fmt.Errorf("render Template %s for Tinkerbell %s: %w", tpl.Name, v, err)
		}
		if err := workflows.CheckTemplate(v, tpl.Name, r, snippetHardwareMap); err != nil {
			return fmt.Errorf("Tinkerbell %s: %w", v, err)
		}
	}
	for _, task := range r.Tasks {
		for _, a := range task.Actions {
			if workflows.MergedEnv(task, a)[workflows.AgentActionEnv] != workflows.AgentActionValue {
				continue
			}
			argv := append(slices.Clone(agentEntrypoint), a.Command...)
			if len(a.Command) > 0 && !strings.HasPrefix(a.Command[0], "-") {
				return fmt.Errorf("Template %s: action %s runs %q: its command must hold flags only, since the image's entrypoint is %q",
					tpl.Name, a.Name, argv, agentEntrypoint)
			}
			if !strings.HasPrefix(a.Image, agentImage+":") || !slices.ContainsFunc(a.Volumes, func(v string) bool { return strings.HasPrefix(v, "/sys/kernel/security:") }) {
				return fmt.Errorf("Template %s: action %s: image %s, volumes %q; want %s and the event log (/sys/kernel/security)",
					tpl.Name, a.Name, a.Image, a.Volumes, agentImage)
			}
		}
	}
	return nil
}

// readmeSnippet is the Template between the markers in deploy/README.md.
func readmeSnippet(t *testing.T) []byte {
	t.Helper()
	m := regexp.MustCompile("(?s)<!-- template-snippet -->\\s*```yaml\\n(.*?)```").FindStringSubmatch(readFile(t, "README.md"))
	if m == nil {
		t.Fatal("deploy/README.md has no ```yaml block after <!-- template-snippet -->")
	}
	return []byte(m[1])
}

func TestAgentTemplateSnippet(t *testing.T) {
	snippet := readmeSnippet(t)
	if err := checkAgentActions(snippet); err != nil {
		t.Errorf("deploy/README.md's Template: %v", err)
	}
	// The check can fail: the snippet naming the subcommand again, or without the agent marker.
	for name, mutated := range map[string]string{
		"refuse/subcommand-again": strings.Replace(string(snippet), "timeout: 600", "timeout: 600\n            command: [\"enroll\"]", 1),
		"refuse/not-the-agent":    strings.Replace(string(snippet), "FLEETD_ACTION: enroll", "FLEETD_ACTION: skip", 1),
	} {
		if mutated == string(snippet) {
			t.Fatalf("%s: the snippet did not change", name)
		}
		if err := checkAgentActions([]byte(mutated)); err == nil {
			t.Errorf("%s: the snippet was accepted", name)
		}
	}
}

// TestExampleTemplatesMatchTheAgentImage: the example Templates run the image built from
// deploy/agent/Containerfile, so their agent actions must fit its entrypoint.
func TestExampleTemplatesMatchTheAgentImage(t *testing.T) {
	files, err := fs.Glob(exampletemplates.FS, "*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example Template: %v", err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(exampletemplates.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkAgentActions(b); err != nil {
			t.Errorf("examples/tinkerbell/%s: %v", f, err)
		}
	}
}
