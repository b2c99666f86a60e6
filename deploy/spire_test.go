package deploy

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

const (
	spireAgentConf = "spire/agent.conf"
	daemonSetPath  = "kubernetes/spire-agent-daemonset.yaml"
	nodeDir        = "/var/lib/fleetd-node"
)

// ldevidPaths are the paths SPIRE's tpm_devid agent must read: the node files the node's
// configuration delivers (docs/enrollment.md).
var ldevidPaths = map[string]string{
	"devid_cert_path": nodeDir + "/ldevid.pem",
	"devid_pub_path":  nodeDir + "/ldevid.pub",
	"devid_priv_path": nodeDir + "/ldevid.priv",
}

var (
	tpmDevIDBlock = regexp.MustCompile(`(?s)NodeAttestor\s+"tpm_devid"\s*\{\s*plugin_data\s*\{(.*?)\}`)
	hclString     = regexp.MustCompile(`(?m)^\s*(\w+)\s*=\s*"([^"]*)"\s*$`)
)

// checkAgentConf returns what is wrong with a SPIRE agent configuration: one NodeAttestor, which
// is tpm_devid reading the LDevID files from the node directory. (interop/spire parses the same
// files with SPIRE's own code.)
func checkAgentConf(text string) []string {
	var bad []string
	if n := strings.Count(text, "NodeAttestor "); n != 1 {
		bad = append(bad, fmt.Sprintf("%d NodeAttestor plugins, want tpm_devid alone", n))
	}
	m := tpmDevIDBlock.FindStringSubmatch(text)
	if m == nil {
		return append(bad, `no NodeAttestor "tpm_devid" with plugin_data`)
	}
	got := map[string]string{}
	for _, kv := range hclString.FindAllStringSubmatch(m[1], -1) {
		got[kv[1]] = kv[2]
	}
	for k, want := range ldevidPaths {
		if got[k] != want {
			bad = append(bad, fmt.Sprintf("tpm_devid %s = %q, want %q", k, got[k], want))
		}
	}
	return bad
}

// spireManifest is the Talos SPIRE agent's manifest, decoded.
type spireManifest struct {
	ns *corev1.Namespace
	cm *corev1.ConfigMap
	ds *appsv1.DaemonSet
}

// decodeSPIREManifest decodes every document strictly (an unknown field is an error).
func decodeSPIREManifest(text string) (spireManifest, error) {
	var m spireManifest
	for i, doc := range strings.Split(text, "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return m, fmt.Errorf("document %d: %w", i, err)
		}
		var into any
		switch meta.Kind {
		case "Namespace":
			m.ns = &corev1.Namespace{}
			into = m.ns
		case "ConfigMap":
			m.cm = &corev1.ConfigMap{}
			into = m.cm
		case "DaemonSet":
			m.ds = &appsv1.DaemonSet{}
			into = m.ds
		case "ServiceAccount":
			into = &corev1.ServiceAccount{}
		case "ClusterRole":
			into = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			into = &rbacv1.ClusterRoleBinding{}
		default:
			return m, fmt.Errorf("document %d: unexpected kind %q", i, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			return m, fmt.Errorf("document %d (%s): %w", i, meta.Kind, err)
		}
	}
	if m.ns == nil || m.cm == nil || m.ds == nil {
		return m, fmt.Errorf("want a Namespace, a ConfigMap and a DaemonSet, got %v %v %v", m.ns != nil, m.cm != nil, m.ds != nil)
	}
	return m, nil
}

// checkSPIREDaemonSet returns what is wrong with the Talos SPIRE agent's DaemonSet: the init
// container installs the LDevID files (writable node directory), the agent reads them read-only
// with the host's TPM, and the watch container, sharing the pod's processes, stops the agent when
// the files change.
func checkSPIREDaemonSet(m spireManifest) []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if m.ds.Namespace != m.ns.Name || m.ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		add("the DaemonSet is not in a namespace that admits privileged pods")
	}
	bad = append(bad, checkAgentConf(m.cm.Data["agent.conf"])...)
	pod := m.ds.Spec.Template.Spec
	if pod.ShareProcessNamespace == nil || !*pod.ShareProcessNamespace {
		add("shareProcessNamespace is not true: the watch container cannot stop the agent")
	}
	hostPaths := map[string]*corev1.HostPathVolumeSource{}
	for _, v := range pod.Volumes {
		hostPaths[v.Name] = v.HostPath
	}
	mount := func(c corev1.Container, path string) (corev1.VolumeMount, *corev1.HostPathVolumeSource) {
		i := slices.IndexFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == path })
		if i < 0 {
			return corev1.VolumeMount{}, nil
		}
		return c.VolumeMounts[i], hostPaths[c.VolumeMounts[i].Name]
	}
	nodeFiles := func(c corev1.Container, readOnly bool) {
		vm, hp := mount(c, nodeDir)
		if hp == nil || hp.Path != nodeDir || hp.Type == nil || *hp.Type != corev1.HostPathDirectory || vm.ReadOnly != readOnly {
			add("%s: %s is %+v read-only %v, want the host's %s (type Directory), read-only %v", c.Name, nodeDir, hp, vm.ReadOnly, nodeDir, readOnly)
		}
	}
	if len(pod.InitContainers) != 1 {
		return append(bad, fmt.Sprintf("%d init containers, want the one that installs the LDevID files", len(pod.InitContainers)))
	}
	init := pod.InitContainers[0]
	if want := []string{"/fleetd", "boot-check", "--install-only", "--dir", nodeDir}; !slices.Equal(init.Command, want) || !strings.HasPrefix(init.Image, agentImage+":") {
		add("init container runs %s %q, want %s:<version> %q", init.Image, init.Command, agentImage, want)
	}
	nodeFiles(init, false)
	byName := map[string]corev1.Container{}
	for _, c := range pod.Containers {
		byName[c.Name] = c
	}
	agent, ok := byName["spire-agent"]
	if !ok {
		return append(bad, "no spire-agent container")
	}
	nodeFiles(agent, true)
	if _, hp := mount(agent, "/dev/tpmrm0"); hp == nil || hp.Path != "/dev/tpmrm0" {
		add("spire-agent: the host's /dev/tpmrm0 is not mounted")
	}
	if sc := agent.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		add("spire-agent is not privileged: it cannot open the host's TPM")
	}
	watch, ok := byName["ldevid-watch"]
	if !ok {
		return append(bad, "no ldevid-watch container: a renewed LDevID would not reach the agent")
	}
	nodeFiles(watch, true)
	script := strings.Join(watch.Command, " ")
	for _, want := range []string{"ldevid.pem", "ldevid.pub", "ldevid.priv", "pkill -TERM -x spire-agent"} {
		if !strings.Contains(script, want) {
			add("ldevid-watch does not mention %q", want)
		}
	}
	return bad
}

func TestSPIREAgentDaemonSet(t *testing.T) {
	base := readFile(t, daemonSetPath)
	replace := func(old, new string) string {
		if !strings.Contains(base, old) {
			t.Fatalf("%s has no %q", daemonSetPath, old)
		}
		return strings.Replace(base, old, new, 1)
	}
	for _, tc := range []struct{ name, text, want string }{
		{name: "ok/as-shipped", text: base},
		{name: "refuse/no-install", text: replace("- --install-only\n", ""), want: "init container runs"},
		{name: "refuse/init-read-only", text: replace("mountPath: /var/lib/fleetd-node\n      containers:", "mountPath: /var/lib/fleetd-node\n              readOnly: true\n      containers:"), want: "install-ldevid: /var/lib/fleetd-node"},
		{name: "refuse/other-dir", text: replace(`devid_priv_path = "/var/lib/fleetd-node/ldevid.priv"`, `devid_priv_path = "/workflow/ldevid.priv"`), want: "devid_priv_path"},
		{name: "refuse/no-shared-processes", text: replace("shareProcessNamespace: true", "shareProcessNamespace: false"), want: "shareProcessNamespace"},
		{name: "refuse/watch-one-file", text: replace("/var/lib/fleetd-node/ldevid.pub /var/lib/fleetd-node/ldevid.priv", ""), want: "ldevid-watch does not mention"},
		{name: "refuse/unknown-field", text: replace("shareProcessNamespace: true", "shareProcessNamespace: true\n      sharePID: true"), want: "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			m, err := decodeSPIREManifest(tc.text)
			if err != nil {
				got = err.Error()
			} else {
				got = strings.Join(checkSPIREDaemonSet(m), "\n")
			}
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("findings:\n%s\nwant one containing %q", got, tc.want)
			}
		})
	}
}

func TestSPIREAgentConf(t *testing.T) {
	base := readFile(t, spireAgentConf)
	if bad := checkAgentConf(base); len(bad) > 0 {
		t.Errorf("%s:\n  %s", spireAgentConf, strings.Join(bad, "\n  "))
	}
	twice := strings.Replace(base, "plugins {\n", "plugins {\n  NodeAttestor \"join_token\" {\n    plugin_data {}\n  }\n", 1)
	if bad := strings.Join(checkAgentConf(twice), "\n"); !strings.Contains(bad, "2 NodeAttestor plugins") {
		t.Errorf("refuse/second-attestor: findings %q", bad)
	}
}

// TestSPIREAgentSystemdUnits: the agent's unit runs the shared configuration once the LDevID is
// on the node, and the path unit restarts it when any of the three files is replaced; systemd's
// own parser accepts all three.
func TestSPIREAgentSystemdUnits(t *testing.T) {
	texts := map[string]string{}
	units := map[string]unit{}
	for _, name := range []string{"spire-agent.service", "spire-agent-ldevid.path", "spire-agent-ldevid.service"} {
		texts[name] = readFile(t, filepath.Join(systemdDir, name))
		u, err := parseUnit(texts[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		units[name] = u
	}
	if got, _ := units["spire-agent.service"].value("Service", "ExecStart"); got != "/usr/local/bin/spire-agent run -config /etc/spire/agent.conf" {
		t.Errorf("spire-agent.service runs %q", got)
	}
	if got := units["spire-agent.service"]["Unit"]["ConditionPathExists"]; !slices.Contains(got, nodeDir+"/ldevid.pem") {
		t.Errorf("spire-agent.service: ConditionPathExists %q, want %s/ldevid.pem among them", got, nodeDir)
	}
	if got := units["spire-agent-ldevid.path"]["Path"]["PathChanged"]; !slices.Equal(got, []string{ldevidPaths["devid_cert_path"], ldevidPaths["devid_pub_path"], ldevidPaths["devid_priv_path"]}) {
		t.Errorf("spire-agent-ldevid.path watches %q, want the three LDevID files", got)
	}
	if got, _ := units["spire-agent-ldevid.path"].value("Path", "Unit"); got != "spire-agent-ldevid.service" {
		t.Errorf("spire-agent-ldevid.path starts %q", got)
	}
	if got, _ := units["spire-agent-ldevid.service"].value("Service", "ExecStart"); got != "/usr/bin/systemctl try-restart spire-agent.service" {
		t.Errorf("spire-agent-ldevid.service runs %q, want a try-restart of spire-agent.service", got)
	}
	needSystemdAnalyze(t)
	for name, text := range texts {
		texts[name] = strings.ReplaceAll(text, "/usr/local/bin/spire-agent", "/usr/local/bin/fleetd") // stageUnits' stub
	}
	if out := verifyUnits(t, stageUnits(t, texts)); len(out) > 0 {
		t.Errorf("systemd-analyze verify:\n  %s", strings.Join(out, "\n  "))
	}
	broken := map[string]string{"spire-agent-ldevid.path": strings.Replace(texts["spire-agent-ldevid.path"], "PathChanged=", "PathChange=", 1)}
	if out := strings.Join(verifyUnits(t, stageUnits(t, broken)), "\n"); !strings.Contains(out, "Unknown key") {
		t.Errorf("refuse/misspelt-key: systemd-analyze verify said %q", out)
	}
}

// TestSPIREAgentAlpineAndCloudInit: the OpenRC script and the hourly check's restart parse as
// shell; the cloud-init snippet is a #cloud-config without write_files (which would drop the
// vendor-data's LDevID files) that enables the agent and its path unit.
func TestSPIREAgentAlpineAndCloudInit(t *testing.T) {
	for _, path := range []string{"alpine/spire-agent", "alpine/fleetd-boot-check"} {
		if out, err := exec.Command("sh", "-n", path).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", path, err, out)
		}
	}
	if text := readFile(t, "alpine/spire-agent"); !strings.Contains(text, `command_args="run -config /etc/spire/agent.conf"`) {
		t.Error("alpine/spire-agent does not run the agent with /etc/spire/agent.conf")
	}
	if text := readFile(t, "alpine/fleetd-boot-check"); !strings.Contains(text, "rc-service spire-agent restart") {
		t.Error("alpine/fleetd-boot-check does not restart the SPIRE agent after a renewal")
	}
	text := readFile(t, "cloud-init/spire-agent.yaml")
	var cc map[string]any
	if err := yaml.Unmarshal([]byte(text), &cc); err != nil || !strings.HasPrefix(text, "#cloud-config\n") {
		t.Fatalf("cloud-init/spire-agent.yaml is not a #cloud-config: %v", err)
	}
	if _, ok := cc["write_files"]; ok {
		t.Error("cloud-init/spire-agent.yaml sets write_files, which drops the vendor-data's LDevID files")
	}
	if got := fmt.Sprint(cc["runcmd"]); got != "[[systemctl enable --now spire-agent.service spire-agent-ldevid.path]]" {
		t.Errorf("cloud-init/spire-agent.yaml runcmd %s", got)
	}
}

// TestNixOSSPIREAgent: services.fleetd-boot-check.spireAgent runs the agent with the given
// configuration once the LDevID is in the node directory, and a path unit restarts it when any of
// the three files is replaced; a configuration that is not an absolute path is refused.
func TestNixOSSPIREAgent(t *testing.T) {
	needNix(t)
	pkg := nixPackage(stageUnits(t, nil))
	node := func(spire map[string]any) map[string]map[string]any {
		return map[string]map[string]any{"fleetd-boot-check": {"enable": true, "package": pkg, "url": "https://spore.lan:8443", "spireAgent": spire}}
	}
	spirePkg := map[string]string{"type": "derivation", "name": "spire", "outPath": "/nix/store/00000000000000000000000000000000-spire-1.13.3"}
	c := evalNixOS(t, node(map[string]any{"enable": true, "package": spirePkg, "configFile": "/etc/spire/agent.conf"}))
	agent, ok := c.Systemd.Services["spire-agent"]
	if !ok {
		t.Fatal("no spire-agent service")
	}
	if got := agent.ServiceConfig["ExecStart"]; got != spirePkg["outPath"]+"/bin/spire-agent run -config /etc/spire/agent.conf" {
		t.Errorf("spire-agent runs %v", got)
	}
	if got := anys(agent.UnitConfig["ConditionPathExists"]); !slices.Contains(got, any(nodeDir+"/ldevid.pem")) {
		t.Errorf("spire-agent: ConditionPathExists %v, want %s/ldevid.pem among them", got, nodeDir)
	}
	path := c.Systemd.Paths["spire-agent-ldevid"]
	if got := anys(path.PathConfig["PathChanged"]); !slices.Equal(got, []any{ldevidPaths["devid_cert_path"], ldevidPaths["devid_pub_path"], ldevidPaths["devid_priv_path"]}) || path.PathConfig["Unit"] != "spire-agent-ldevid.service" {
		t.Errorf("spire-agent-ldevid path unit %+v, want the three LDevID files starting spire-agent-ldevid.service", path.PathConfig)
	}
	if got := c.Systemd.Services["spire-agent-ldevid"].ServiceConfig["ExecStart"]; !strings.HasSuffix(fmt.Sprint(got), "systemctl try-restart spire-agent.service") {
		t.Errorf("spire-agent-ldevid runs %v, want a try-restart of spire-agent.service", got)
	}
	if off := evalNixOS(t, node(map[string]any{})); len(off.Systemd.Paths) != 0 || off.Systemd.Services["spire-agent"].ServiceConfig != nil {
		t.Error("ok/off: the SPIRE agent is on although spireAgent.enable is false")
	}
	wantNixError(t, "", node(map[string]any{"enable": true, "package": spirePkg, "configFile": "agent.conf"}),
		"services.fleetd-boot-check.spireAgent.configFile' is not of type `path'")
}
