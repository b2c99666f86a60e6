package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/dev/dockerapi"
	"github.com/folly-infra/fleetd/dev/fakehw"
	"github.com/folly-infra/fleetd/dev/swtpm"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
	"github.com/folly-infra/fleetd/fleet"
)

// runAction does what the action's container would have done, by image (docs/design.md §8):
//   - the fleetd agent (entrypoint `fleetd enroll`): the real `fleetd enroll` against the
//     machine's swtpm, with the action's environment and the machine's sysfs, devfs and
//     workflow directories;
//   - the wipe-disk shell action: the Template's own script with DRY_RUN=1 against the
//     machine's sysfs and devfs, so the disk is resolved by serial exactly as on hardware and
//     zero or two matches fail; then the disk's simulated content and partitions are erased,
//     and the erase reported in the shared directory's wipe-result as the script reports a real one;
//   - the fleetd agent with FLEETD_ACTION=wipe-receipt: the real `fleetd enroll` entrypoint,
//     which hands the step to `fleetd wipe-receipt`, against the same swtpm: the TPM's receipt
//     of the erase (docs/http.md, "Wipe receipts");
//   - image2disk/qemuimg2disk: records the image on the disk wipe-disk selected and makes its
//     partitions appear; for a Talos class, the disk's device node becomes what a Talos metal
//     image leaves on a disk: a GPT disk with its partitions, META zeroed;
//   - the fleetd agent with FLEETD_ACTION=talos-meta: the real `fleetd enroll` entrypoint, which
//     hands the step to `fleetd talos-meta`, against the machine's devfs: the fetch secret into
//     the written disk's META;
//   - write-nocloud-seed: the Template's steps, with the fetch from the machine's address and the
//     root file system as the machine's disk/ directory;
//   - write-fetch-secret: the fetch secret copied into the image (the machine's disk/ directory);
//   - waitdaemon (reboot, power-off): records it.
//
// Anything else fails, naming the action: pretending it succeeded would hide a Template change.
func (mc *machine) runAction(ctx context.Context, wf *tinkerbell.Workflow, a tinkerbell.Action, tpm *swtpm.Instance, eventLog string) (string, error) {
	switch {
	case strings.Contains(a.Image, "fleetd-agent") && a.Env[api.AgentActionEnv] == api.AgentActionWipeReceipt:
		return mc.wipeReceipt(ctx, wf, a, tpm)
	case strings.Contains(a.Image, "fleetd-agent") && a.Env[api.AgentActionEnv] == api.AgentActionTalosMeta:
		return mc.talosMeta(ctx, a)
	case strings.Contains(a.Image, "fleetd-agent"):
		return mc.enroll(ctx, wf, a, tpm, eventLog)
	case isShell(a) && a.Name == "wipe-disk":
		return mc.wipeDisk(ctx, wf, a)
	case strings.Contains(a.Image, "image2disk") || strings.Contains(a.Image, "qemuimg2disk"):
		return mc.writeImage(ctx, wf, a)
	case isShell(a) && a.Name == "write-nocloud-seed":
		return mc.writeNoCloudSeed(ctx, wf, a)
	case isShell(a) && a.Name == "write-fetch-secret":
		return mc.writeFetchSecret(a)
	case strings.Contains(a.Image, "waitdaemon"):
		what := strings.Join(a.Command, " ")
		mc.say("%s: the machine would %s once the Workflow is done", a.Name, what)
		return "the machine " + what + "s", nil
	}
	return "", fmt.Errorf("fleetsim cannot simulate action %s (image %s) of Workflow %s: teach dev/stack/actions.go what it does", a.Name, a.Image, wf.Name)
}

func isShell(a tinkerbell.Action) bool {
	return len(a.Command) == 3 && a.Command[0] == "/bin/sh" && a.Command[1] == "-c"
}

// machineEnv is the environment that points a HookOS process at the machine's files. The
// action's FLEETD_WORKFLOW_DIR is already the machine's directory for it (workflowDir).
func (mc *machine) machineEnv(a tinkerbell.Action) map[string]string {
	vars := map[string]string{}
	for k, v := range a.Env {
		vars[k] = v
	}
	vars["FLEETD_CA_FILE"] = mc.info.CA.Fleetd // baked into the HookOS image with fleetd's CA
	vars["FLEETD_SYSFS"] = mc.path(MachineSysDir)
	vars["FLEETD_DEVFS"] = mc.path(MachineDevDir)
	return vars
}

// workflowDir is where an action's FLEETD_WORKFLOW_DIR (default /workflow: the directory the
// fleetd agent writes the disk it authorized, its certificates and the fetch secret into, and
// that the later actions read) is on the simulated machine: the machine's workflow directory
// when the container has a bind onto that path (tink-worker v0.12.2 binds its own /workflow;
// the Templates declare the request's shared volume for tink-agent v0.25, which binds nothing
// else), otherwise a directory of the container's own, emptied with it (done removes it), as a
// container's own file system is. An action of a Template that declares no shared volume thus
// finds nothing the agent wrote, as on hardware.
func (mc *machine) workflowDir(c dockerapi.Container, inContainer string) (dir string, done func(), err error) {
	if inContainer == "" {
		inContainer = "/workflow"
	}
	for _, b := range c.Binds {
		if dockerapi.BindTarget(b) == inContainer {
			return mc.path(MachineWorkflowDir), func() {}, nil
		}
	}
	if err := os.MkdirAll(mc.path(MachineContainersDir), 0o700); err != nil {
		return "", nil, err
	}
	dir, err = os.MkdirTemp(mc.path(MachineContainersDir), c.Name+"-")
	if err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// enroll runs the real agent, `fleetd enroll` (its flags from the environment, as the Template
// passes them), against the machine's swtpm, reaching fleetd through the machine's relay (its
// own address). Its output goes to the machine's log; its success is recorded (records.go) with
// the disk it authorized and the certificates it wrote.
func (mc *machine) enroll(ctx context.Context, wf *tinkerbell.Workflow, a tinkerbell.Action, tpm *swtpm.Instance, eventLog string) (string, error) {
	vars := mc.machineEnv(a)
	vars["FLEETD_TPM"] = tpm.Spec()
	vars["FLEETD_EVENT_LOG"] = eventLog
	relayURL, stop, err := mc.relay()
	if err != nil {
		return "", err
	}
	defer stop()
	vars["FLEETD_URL"] = relayURL
	out, err := mc.run(ctx, exec.Command(mc.info.Fleetd.Binary, append([]string{"enroll"}, a.Command...)...), vars)
	if err != nil {
		return "", fmt.Errorf("fleetd enroll: %w: %s", err, lastLine(out))
	}
	disk := mc.workflowDisk(a)
	mc.record(RecordEnrolled, wf, a, "disk", disk, "ldevid_serial", mc.certSerial(a, "ldevid.pem"), "lak_serial", mc.certSerial(a, "lak.pem"))
	return "enrolled; disk authorized: " + disk, nil
}

// wipeDisk runs the Template's wipe-disk script in dry-run mode on the machine's files, then
// erases what the simulation keeps of the disk it selected: its content and its partitions. The
// erasure is recorded with the authorization it acted on (disk in the shared directory).
func (mc *machine) wipeDisk(ctx context.Context, wf *tinkerbell.Workflow, a tinkerbell.Action) (string, error) {
	vars := mc.machineEnv(a)
	vars["DRY_RUN"] = "1"
	out, err := mc.run(ctx, exec.Command("/bin/sh", "-c", a.Command[2]), vars)
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, lastLine(out))
	}
	target, err := filepath.EvalSymlinks(mc.devPath("/dev/fleetd-disk"))
	if err != nil {
		return "", fmt.Errorf("wipe-disk succeeded but linked no /dev/fleetd-disk: %w", err)
	}
	dev := filepath.Base(target)
	mc.record(RecordWipe, wf, a, "disk", mc.workflowDisk(a), "target", "/dev/"+dev, "serial", mc.blockSerial(dev))
	if err := mc.erase(dev); err != nil {
		return "", err
	}
	// The script reports a real erase in wipe-result; a dry run reports nothing, so the
	// simulation reports its own erase, by its own method.
	report := fmt.Sprintf("serial=%s\nmethod=simulated\nresult=erased\nbytes=0\n", mc.blockSerial(dev))
	if err := os.WriteFile(filepath.Join(a.Env["FLEETD_WORKFLOW_DIR"], api.WipeResultFile), []byte(report), 0o644); err != nil {
		return "", fmt.Errorf("report the erase: %w", err)
	}
	return strings.Replace(lastLine(out), "would erase", "erased (simulated)", 1), nil
}

// wipeReceipt runs the receipt step as the agent image runs it: the real `fleetd enroll`
// entrypoint with the action's environment (FLEETD_ACTION=wipe-receipt), against the machine's
// swtpm, from the machine's address. Its result is recorded (records.go) with the report it
// quoted and fleetd's answer.
func (mc *machine) wipeReceipt(ctx context.Context, wf *tinkerbell.Workflow, a tinkerbell.Action, tpm *swtpm.Instance) (string, error) {
	vars := mc.machineEnv(a)
	vars["FLEETD_TPM"] = tpm.Spec()
	relayURL, stop, err := mc.relay()
	if err != nil {
		return "", err
	}
	defer stop()
	vars["FLEETD_URL"] = relayURL
	out, err := mc.run(ctx, exec.Command(mc.info.Fleetd.Binary, append([]string{"enroll"}, a.Command...)...), vars)
	if err != nil {
		return "", fmt.Errorf("fleetd wipe-receipt: %w: %s", err, lastLine(out))
	}
	var done struct {
		Outcome    string `json:"outcome"`
		DiskSerial string `json:"disk_serial"`
		Method     string `json:"method"`
		Bytes      uint64 `json:"bytes"`
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		_ = json.Unmarshal([]byte(l), &done) // the agent's last line with a step of receipt is its result
	}
	mc.record(RecordReceipt, wf, a, "serial", done.DiskSerial, "method", done.Method, "bytes", strconv.FormatUint(done.Bytes, 10), "outcome", done.Outcome)
	return "receipt " + done.Outcome + ": disk " + done.DiskSerial + " " + done.Method, nil
}

// talosMeta runs the Talos META step as the agent image runs it: the real `fleetd enroll`
// entrypoint with the action's environment (FLEETD_ACTION=talos-meta), against the machine's
// devfs, where the written disk's device node holds the image.
func (mc *machine) talosMeta(ctx context.Context, a tinkerbell.Action) (string, error) {
	out, err := mc.run(ctx, exec.Command(mc.info.Fleetd.Binary, append([]string{"enroll"}, a.Command...)...), mc.machineEnv(a))
	if err != nil {
		return "", fmt.Errorf("fleetd talos-meta: %w: %s", err, lastLine(out))
	}
	return "wrote the fetch secret into the disk's META", nil
}

// erase removes the install disk's simulated content and the partitions of block device dev,
// and empties its device node (where a Talos image was written).
func (mc *machine) erase(dev string) error {
	if err := os.Truncate(mc.path(MachineDevDir, dev), 0); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("erase %s: %w", dev, err)
	}
	parts, _ := filepath.Glob(mc.path(MachineSysDir, "block", dev, dev+"*"))
	nodes, _ := filepath.Glob(mc.path(MachineDevDir, dev+"[0-9]*"))
	for _, p := range append(append(parts, nodes...), mc.path(MachineDiskDir)) {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("erase %s: %w", dev, err)
		}
	}
	return os.MkdirAll(mc.path(MachineDiskDir), 0o700)
}

// imagePartitions is how many partitions a written image has (enough for the Templates' ROOT_PARTITION).
const imagePartitions = 3

// writeImage records what image2disk would write, to the disk wipe-disk selected, and makes the
// image's partitions appear in sysfs and devfs as the kernel would after re-reading the disk. A
// Talos class's image is written for real, in the shape of a Talos metal image (a GPT disk with
// a zeroed META: fakehw.WriteTalosImage), into the disk's device node, where the META step and
// the first boot read it. The write is recorded with the authorization in the shared directory's disk.
func (mc *machine) writeImage(ctx context.Context, wf *tinkerbell.Workflow, a tinkerbell.Action) (string, error) {
	dest := a.Env["DEST_DISK"]
	target, err := filepath.EvalSymlinks(mc.devPath(dest))
	if err != nil {
		return "", fmt.Errorf("DEST_DISK %s: %w (wipe-disk selected no disk)", dest, err)
	}
	dev := filepath.Base(target)
	mc.record(RecordImage, wf, a, "disk", mc.workflowDisk(a), "target", "/dev/"+dev, "serial", mc.blockSerial(dev))
	kind, err := mc.classKind(ctx)
	if err != nil {
		return "", fmt.Errorf("write the image: %w", err)
	}
	partitions := imagePartitions
	if kind == fleet.KindTalos {
		if err := fakehw.WriteTalosImage(target); err != nil {
			return "", fmt.Errorf("write the Talos image: %w", err)
		}
		partitions = len(fakehw.TalosImage(512))
	}
	for n := 1; n <= partitions; n++ {
		part := fmt.Sprintf("%s%d", dev, n)
		if err := os.MkdirAll(mc.path(MachineSysDir, "block", dev, part), 0o700); err != nil {
			return "", err
		}
		if err := os.WriteFile(mc.path(MachineSysDir, "block", dev, part, "partition"), []byte(fmt.Sprintf("%d\n", n)), 0o600); err != nil {
			return "", err
		}
		if err := os.WriteFile(mc.path(MachineDevDir, part), nil, 0o600); err != nil {
			return "", err
		}
	}
	line := fmt.Sprintf("wrote %s to %s (/dev/%s) with %s", a.Env["IMG_URL"], dest, dev, a.Image)
	if err := os.WriteFile(mc.path(MachineDiskDir, "IMAGE"), []byte(line+"\n"), 0o600); err != nil {
		return "", err
	}
	return line + " (simulated)", nil
}

// devPath maps a /dev path of HookOS into the machine's devfs.
func (mc *machine) devPath(p string) string {
	return mc.path(MachineDevDir, strings.TrimPrefix(filepath.Clean(p), "/dev/"))
}

// run runs a process with only the given environment, appending its output to the machine's
// log, and returns the output.
func (mc *machine) run(ctx context.Context, cmd *exec.Cmd, vars map[string]string) (string, error) {
	var buf bytes.Buffer
	cmd.Env = env(vars)
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.Dir = mc.m.Dir
	err := startAndWait(ctx, cmd)
	if cmd.Path == mc.info.Fleetd.Binary { // the agent's own log, kept whole for LogProblems
		if werr := appendFile(filepath.Join(mc.m.Dir, MachineAgentLog), buf.Bytes()); werr != nil {
			fmt.Fprintf(mc.log, "    (agent log not kept: %v)\n", werr)
		}
	}
	for _, l := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		if l != "" {
			fmt.Fprintf(mc.log, "    | %s\n", l)
		}
	}
	return buf.String(), err
}

// startAndWait runs cmd until it exits or ctx ends (then it is killed).
func startAndWait(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		_ = <-done // the exit of a killed process says only that it was killed: ctx's error says why
		return ctx.Err()
	}
}

// lastLine is the agent's last log line, in words when it is the JSON line a failed run ends
// with ("fleetd enroll: fleetd refused (400 …): …"), as it is otherwise.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if f, ok := failureLine(last); ok {
		return "fleetd " + f.Cmd + ": " + f.Error
	}
	return last
}

// agentFailure is the line a failed `fleetd enroll` or `fleetd boot-check` ends its log with.
type agentFailure struct {
	Cmd   string `json:"cmd"`
	Error string `json:"error"`
}

func failureLine(line string) (agentFailure, bool) {
	var f agentFailure
	if json.Unmarshal([]byte(line), &f) != nil || f.Error == "" || f.Cmd == "" {
		return agentFailure{}, false
	}
	return f, true
}
