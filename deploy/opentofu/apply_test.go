// Package opentofu_test applies the OpenTofu root of this directory with a real tofu and the
// real REST provider (both built by scripts/tools.sh) to the NetBox emulator of the development
// stack, and runs fleetd against what it created.
package opentofu_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/dev/stack"
)

// tofu runs the tofu binary in a root directory with an offline provider mirror.
type tofu struct {
	bin, dir string
	env      []string
	vars     []string
}

// tool is the cached binary of a scripts/tools.sh tool; a missing one fails the test.
func tool(t *testing.T, root, name string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(root, "scripts", "tools.sh"), "path", name).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s is not built (make tools builds it): %v %s", name, err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// newTofu copies the root's .tf files to a temporary directory (no state in the checkout) and
// installs the provider in a filesystem mirror, as an offline `tofu init` finds it.
func newTofu(t *testing.T, root string) *tofu {
	t.Helper()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "root")
	mirror := filepath.Join(tmp, "mirror", "registry.opentofu.org", "mastercard", "restapi", "1.20.0", "linux_amd64")
	for _, d := range []string{dir, mirror} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(root, "deploy", "opentofu", "*.tf"))
	if len(files) < 4 {
		t.Fatalf("deploy/opentofu has %d .tf files, want main, variables, versions, outputs", len(files))
	}
	for _, f := range append(files, tool(t, root, "terraform-provider-restapi")) {
		dst := filepath.Join(dir, filepath.Base(f))
		if strings.HasSuffix(f, "terraform-provider-restapi") {
			dst = filepath.Join(mirror, "terraform-provider-restapi_v1.20.0")
		}
		copyFile(t, f, dst)
	}
	cli := filepath.Join(tmp, "cli.tfrc")
	writeFile(t, cli, fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = ["registry.opentofu.org/mastercard/restapi"]
  }
  direct {
    exclude = ["registry.opentofu.org/mastercard/restapi"]
  }
}
`, filepath.Join(tmp, "mirror")))
	// This machine's environment names a CLI configuration that does not exist; the test sets
	// its own, and API_DATA_IS_SENSITIVE keeps the webhooks' secret out of tofu's output.
	env := append(os.Environ(), "TF_CLI_CONFIG_FILE="+cli, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1",
		"API_DATA_IS_SENSITIVE=true", "TF_INPUT=0")
	tf := &tofu{bin: tool(t, root, "tofu"), dir: dir, env: env}
	if code, out := tf.run(context.Background(), "fmt", "-check", "-diff"); code != 0 {
		t.Errorf("deploy/opentofu is not in tofu fmt's layout (tofu fmt deploy/opentofu):\n%s", out)
	}
	return tf
}

// run runs tofu with args and returns its exit code and output.
func (tf *tofu) run(ctx context.Context, args ...string) (int, string) {
	cmd := exec.CommandContext(ctx, tf.bin, append(append(args, "-no-color"), tf.vars...)...)
	cmd.Dir, cmd.Env = tf.dir, tf.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	}
	if err != nil {
		return -1, err.Error()
	}
	return 0, out.String()
}

func (tf *tofu) must(ctx context.Context, args ...string) error {
	if code, out := tf.run(ctx, args...); code != 0 {
		return fmt.Errorf("tofu %s: exit %d\n%s", args[0], code, out)
	}
	return nil
}

// TestApply: tofu applies netbox-webhooks.yaml to the stack's NetBox; the objects are what the
// emulator's own LoadSchema makes; fleetd verifies a device change's webhook signed with the
// secret tofu set (and refuses one signed with another); a second plan changes nothing; destroy
// removes every object.
func TestApply(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the development stack and runs tofu")
	}
	root, err := stack.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	tf := newTofu(t, root)
	bin, err := stack.BuildFleetd(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var target stack.SchemaTarget
	s, err := stack.Start(ctx, stack.Options{Dir: filepath.Join(t.TempDir(), "state"), FleetdBinary: bin,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		ApplySchema: func(ctx context.Context, st stack.SchemaTarget) error {
			target = st
			tf.vars = []string{"-var", "netbox_url=" + st.NetBoxURL, "-var", "netbox_token=" + st.Token,
				"-var", "fleetd_url=" + st.FleetdURL, "-var", "webhook_secret=" + st.WebhookSecret,
				"-var", "webhooks_file=" + st.File}
			if err := tf.must(ctx, "init", "-input=false"); err != nil {
				return err
			}
			return tf.must(ctx, "apply", "-input=false", "-auto-approve")
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sameAsLoadSchema(t, s.NetBox(), target)
	fleetdVerifies(t, ctx, s, target)

	if code, out := tf.run(ctx, "plan", "-input=false", "-detailed-exitcode"); code != 0 {
		t.Errorf("a second tofu plan = exit %d, want 0 (no change):\n%s", code, out)
	}
	fleetdRefusesOtherSecret(t, ctx, s, target)
	if err := tf.must(ctx, "destroy", "-input=false", "-auto-approve"); err != nil {
		t.Fatal(err)
	}
	for _, path := range schemaLists {
		if n := len(list(t, target, path)); n != 0 {
			t.Errorf("%s after tofu destroy: %d objects, want none", path, n)
		}
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
