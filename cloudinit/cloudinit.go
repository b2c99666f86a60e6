// Package cloudinit runs the real cloud-init's own checks over what a cloud-init-nocloud class
// gives a node (docs/design.md §1 step 6): `cloud-init schema` over a #cloud-config document
// (the class's user-data, fleetd's vendor-data), `cloud-init devel net-convert` over a network
// config, and cloud-init's NoCloud datasource over a whole seed directory. fleetd does not parse
// cloud-config itself: what the node's cloud-init accepts is what cloud-init says.
//
// Trust assumptions: the documents are the owner's (classes.json) or fleetd's own; cloud-init
// runs as a child process with a time limit and reads only the files written for it here.
// Debian's cloud-init 22.4 is the version tested (`make deps` installs it); the NixOS module puts
// cloud-init on fleetd's unit path so that `fleetd check` uses it there.
package cloudinit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ErrNotInstalled is returned when no cloud-init is on PATH.
var ErrNotInstalled = errors.New("cloud-init is not installed (not on PATH): install it (Debian's package cloud-init) to validate cloud-config")

// timeout bounds one cloud-init run (it starts a Python interpreter: about a second, many on a busy machine).
const timeout = 3 * time.Minute

// Binary is the path of cloud-init on PATH, or ErrNotInstalled.
func Binary() (string, error) {
	p, err := exec.LookPath("cloud-init")
	if err != nil {
		return "", ErrNotInstalled
	}
	return p, nil
}

// IsCloudConfig reports whether a user-data document is #cloud-config, the one format `cloud-init
// schema` checks (a shell script, a MIME multipart or an include is not).
func IsCloudConfig(doc string) bool {
	first, _, _ := strings.Cut(doc, "\n")
	return strings.TrimSpace(first) == "#cloud-config"
}

// SchemaError is cloud-init's refusal of a document, in its own words.
type SchemaError struct{ Output string }

func (e *SchemaError) Error() string { return "cloud-init schema: " + e.Output }

// Schema validates a #cloud-config document with `cloud-init schema --config-file`. It returns
// nil when cloud-init accepts it, a *SchemaError with cloud-init's words when it does not, and
// another error (ErrNotInstalled among them) when cloud-init could not be run.
func Schema(ctx context.Context, doc []byte) error {
	dir, err := os.MkdirTemp("", "fleetd-cloud-init-")
	if err != nil {
		return fmt.Errorf("cloud-init schema: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "user-data")
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		return fmt.Errorf("cloud-init schema: %w", err)
	}
	out, err := run(ctx, "schema", "--config-file", path)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return &SchemaError{Output: words(out, path)}
	}
	return err
}

// NetConvert parses a network-config v2 document with cloud-init's own network state and renders
// it as systemd-networkd units (`cloud-init devel net-convert -k yaml -D debian -O networkd`), so
// every address, route and match is read by cloud-init rather than passed through as netplan is.
// It returns the .network files' text.
func NetConvert(ctx context.Context, networkConfig []byte) (string, error) {
	dir, err := os.MkdirTemp("", "fleetd-cloud-init-")
	if err != nil {
		return "", fmt.Errorf("cloud-init net-convert: %w", err)
	}
	defer os.RemoveAll(dir)
	in := filepath.Join(dir, "network-config")
	if err := os.WriteFile(in, networkConfig, 0o600); err != nil {
		return "", fmt.Errorf("cloud-init net-convert: %w", err)
	}
	outDir := filepath.Join(dir, "out")
	out, err := run(ctx, "devel", "net-convert", "-p", in, "-k", "yaml", "-D", "debian", "-O", "networkd", "-d", outDir)
	if err != nil {
		return "", fmt.Errorf("cloud-init net-convert: %w: %s", err, lastLines(out, 2))
	}
	units, _ := filepath.Glob(filepath.Join(outDir, "etc", "systemd", "network", "*.network"))
	var b strings.Builder
	for _, u := range units {
		text, err := os.ReadFile(u)
		if err != nil {
			return "", fmt.Errorf("cloud-init net-convert: %w", err)
		}
		b.Write(text)
	}
	if b.Len() == 0 {
		return "", fmt.Errorf("cloud-init net-convert rendered no .network unit: %s", words(out, in))
	}
	return b.String(), nil
}

// lastLines is the last n non-empty lines of a Python traceback: the exception and its message.
func lastLines(out string, n int) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(len(lines)-n, 0):], "; ")
}

func run(ctx context.Context, args ...string) (string, error) {
	bin, err := Binary()
	if err != nil {
		return "", err
	}
	return runProgram(ctx, bin, args...)
}

// runProgram runs a program with the time limit and returns its output, stdout and stderr
// together.
func runProgram(ctx context.Context, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// words is cloud-init's output on one line, without the temporary file's name and the empty
// "deprecations" heading that 22.4 prints before every answer.
func words(out, path string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(strings.ReplaceAll(l, path, "the document"))
		if l == "" || l == "Error:" || strings.HasPrefix(l, "Cloud config schema deprecations:") && strings.TrimSpace(strings.TrimPrefix(l, "Cloud config schema deprecations:")) == "" {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "; ")
}
