package deploy

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	exampletemplates "github.com/folly-infra/fleetd/examples/tinkerbell"
)

const (
	cronJobPath = "kubernetes/boot-check-cronjob.yaml"
	agentImage  = "ghcr.io/folly-infra/fleetd-agent"
)

// hostMount is a host path the boot check's pod must see.
type hostMount struct {
	path     string
	kind     corev1.HostPathType
	readOnly bool
}

// bootCheckMounts: the TPM, the event log and the LAK files from enrollment (docs/design.md §5).
var bootCheckMounts = []hostMount{
	{path: "/dev/tpmrm0", kind: corev1.HostPathCharDev},
	{path: "/sys/kernel/security", kind: corev1.HostPathDirectory, readOnly: true},
	{path: "/var/lib/fleetd-node", kind: corev1.HostPathDirectory, readOnly: false}, // renewals are installed there
}

// decodeCronJobFile decodes the manifest's documents strictly (an unknown field is an error).
func decodeCronJobFile(text string) (*corev1.Namespace, *batchv1.CronJob, error) {
	var ns *corev1.Namespace
	var cj *batchv1.CronJob
	for i, doc := range strings.Split(text, "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i, err)
		}
		var err error
		switch meta.Kind {
		case "Namespace":
			ns = &corev1.Namespace{}
			err = yaml.UnmarshalStrict([]byte(doc), ns)
		case "CronJob":
			cj = &batchv1.CronJob{}
			err = yaml.UnmarshalStrict([]byte(doc), cj)
		default:
			err = fmt.Errorf("unexpected kind %q", meta.Kind)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("document %d (%s): %w", i, meta.Kind, err)
		}
	}
	if ns == nil || cj == nil {
		return nil, nil, fmt.Errorf("want a Namespace and a CronJob, got namespace %v, cronjob %v", ns != nil, cj != nil)
	}
	return ns, cj, nil
}

// checkCronJob returns what is wrong with the boot check's CronJob.
func checkCronJob(ns *corev1.Namespace, cj *batchv1.CronJob) []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if f := strings.Fields(cj.Spec.Schedule); len(f) != 5 || strings.ContainsAny(f[0], "*/,-") || f[1] != "*" || f[2] != "*" || f[3] != "*" || f[4] != "*" {
		add("schedule %q is not once an hour (\"M * * * *\")", cj.Spec.Schedule)
	}
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		add("concurrencyPolicy %q, want Forbid", cj.Spec.ConcurrencyPolicy)
	}
	if cj.Namespace != ns.Name || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		add("CronJob in namespace %q, namespace %q with enforce=%q: want the CronJob in a namespace that admits privileged pods",
			cj.Namespace, ns.Name, ns.Labels["pod-security.kubernetes.io/enforce"])
	}
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	if host := pod.NodeSelector["kubernetes.io/hostname"]; host == "" || cj.Name != "fleetd-boot-check-"+host {
		add("CronJob %s pinned to node %q: want one CronJob per node, named fleetd-boot-check-<node>", cj.Name, host)
	}
	if cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds == nil {
		add("the Job has no activeDeadlineSeconds: a hung check would block the next")
	}
	if len(pod.Containers) != 1 {
		return append(bad, fmt.Sprintf("%d containers, want 1", len(pod.Containers)))
	}
	c := pod.Containers[0]
	if !strings.HasPrefix(c.Image, agentImage+":") {
		add("image %s, want %s:<version>", c.Image, agentImage)
	}
	if want := append([]string{"/fleetd"}, bootCheckArgs...); !slices.Equal(c.Command, want) {
		add("command %q, want %q (it replaces the image's enroll entrypoint)", c.Command, want)
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		add("the container must be privileged (to open the host's TPM) with a read-only root file system")
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	for _, want := range bootCheckMounts {
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == want.path })
		if i < 0 {
			add("nothing is mounted at %s", want.path)
			continue
		}
		m := c.VolumeMounts[i]
		hp := volumes[m.Name].HostPath
		if hp == nil || hp.Path != want.path || hp.Type == nil || *hp.Type != want.kind || m.ReadOnly != want.readOnly {
			add("%s: volume %s is %+v read-only %v, want host path %s of type %s, read-only %v", want.path, m.Name, hp, m.ReadOnly, want.path, want.kind, want.readOnly)
		}
	}
	return bad
}

func TestBootCheckCronJob(t *testing.T) {
	base := readFile(t, cronJobPath)
	replace := func(old, new string) string {
		if !strings.Contains(base, old) {
			t.Fatalf("%s has no %q", cronJobPath, old)
		}
		return strings.Replace(base, old, new, 1)
	}
	for _, tc := range []struct {
		name, text, want string // want: a substring of the findings or the decode error; "" for none
	}{
		{name: "ok/as-shipped", text: base},
		{name: "refuse/no-tpm", text: replace("mountPath: /dev/tpmrm0", "mountPath: /dev/tpm0"), want: "nothing is mounted at /dev/tpmrm0"},
		{name: "refuse/lak-created-empty", text: replace("path: /var/lib/fleetd-node\n                type: Directory", "path: /var/lib/fleetd-node\n                type: DirectoryOrCreate"), want: "/var/lib/fleetd-node: volume lak"},
		{name: "refuse/lak-read-only", text: replace("mountPath: /var/lib/fleetd-node\n", "mountPath: /var/lib/fleetd-node\n                  readOnly: true\n"), want: "read-only false"},
		{name: "refuse/enroll", text: replace("- boot-check", "- enroll"), want: "command"},
		{name: "refuse/any-node", text: replace("kubernetes.io/hostname: node-a", "kubernetes.io/os: linux"), want: "pinned to node"},
		{name: "refuse/every-minute", text: replace(`schedule: "7 * * * *"`, `schedule: "* * * * *"`), want: "schedule"},
		{name: "refuse/unknown-field", text: replace("readOnlyRootFilesystem: true", "readOnlyRootFilesystem: true\n                readOnlyRoot: true"), want: "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			ns, cj, err := decodeCronJobFile(tc.text)
			if err != nil {
				got = err.Error()
			} else {
				got = strings.Join(checkCronJob(ns, cj), "\n")
			}
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("findings:\n%s\nwant one containing %q", got, tc.want)
			}
		})
	}
}

// TestAgentImageVersion: every file that names the agent image names the same version, so a
// release bumps all of them together.
func TestAgentImageVersion(t *testing.T) {
	texts := map[string]string{cronJobPath: readFile(t, cronJobPath), daemonSetPath: readFile(t, daemonSetPath), "README.md": readFile(t, "README.md")}
	examples, err := fs.Glob(exampletemplates.FS, "*.yaml")
	if err != nil || len(examples) == 0 {
		t.Fatalf("no example Template: %v", err)
	}
	for _, f := range examples {
		b, err := fs.ReadFile(exampletemplates.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		texts["examples/tinkerbell/"+f] = string(b)
	}
	tags := map[string][]string{}
	for f, text := range texts {
		for _, part := range strings.Split(text, agentImage+":")[1:] {
			tag := strings.FieldsFunc(part, func(r rune) bool { return strings.ContainsRune(" \t\n\"'`,]", r) })[0]
			tags[tag] = append(tags[tag], f)
		}
	}
	if len(tags) != 1 {
		t.Errorf("the agent image %s appears with %d versions; want one: %v", agentImage, len(tags), tags)
	}
}
