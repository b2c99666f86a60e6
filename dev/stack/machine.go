package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/folly-infra/fleetd/dev/swtpm"
)

// StepOptions tune a machine step (Netboot, Boot, BootCheck).
type StepOptions struct {
	// Out receives the step's progress lines; they also go to the machine's log.
	Out io.Writer
	// EventLog is what the firmware measured at this power-on; nil is the machine's recorded
	// boot (sys/kernel/security/tpm0/binary_bios_measurements). Another log models a changed
	// boot (a firmware or bootloader update).
	EventLog []byte
	// Forge names actions of the netboot's Workflow that the machine does not run: each one's
	// container exits 0 at once, so the worker reports it succeeded. It models a forged
	// completion (a wipe image that exits 0 after doing nothing, or a host that reports the rest
	// of a wipe through the worker protocol): forging wipe-disk and wipe-receipt leaves the disk
	// as it was and sends fleetd no receipt.
	Forge []string
	// Kubelet is what a Talos machine's kubelet does at its first boot (Boot) or at Join when
	// the stack runs a workload cluster: join and post Ready (the default), join and never be
	// Ready, or run none.
	Kubelet KubeletMode
}

// machine is one simulated machine during a step: it powers on (its swtpm runs only while a
// step runs, docs/design.md §8), talks to fleetd from its own loopback address, and records what it did.
type machine struct {
	info Info
	name string
	m    Machine
	out  io.Writer
	log  *os.File
	step string
}

// openMachine looks the machine up in stack.json and opens its log.
func openMachine(info Info, name, step string, out io.Writer) (*machine, error) {
	m, ok := info.Machines[name]
	if !ok {
		return nil, fmt.Errorf("%s has no simulated machine: it is not in stack.json's machines (a declared TPM 1.2 has none)", name)
	}
	if out == nil {
		out = io.Discard
	}
	f, err := os.OpenFile(filepath.Join(m.Dir, MachineLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the log of machine %s: %w", name, err)
	}
	// One step at a time: a machine has one TPM and one boot.
	if err := lockBriefly(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("machine %s is busy with another step (%w); wait for it to end", name, err)
	}
	return &machine{info: info, name: name, m: m, out: out, log: f, step: step}, nil
}

// lockWait is how long openMachine waits for a machine's lock. A step holds it for its whole
// run (seconds), so a longer wait means another step runs. A short wait is needed all the same:
// while this process starts a program for one machine's step, the forked child holds a copy of
// every open file — another machine's locked log among them — until it execs, so a lock just
// released by a step of this process may still be held for a moment.
const lockWait = 2 * time.Second

// lockBriefly takes the exclusive lock on f, waiting up to lockWait.
func lockBriefly(f *os.File) error {
	end := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil || !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(end) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// close ends the step (and releases the machine's lock).
func (mc *machine) close() { mc.log.Close() }

// say records one line of what the machine did: on Out, and with a time stamp in its log.
func (mc *machine) say(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	fmt.Fprintf(mc.out, "%s %s: %s\n", mc.name, mc.step, line)
	fmt.Fprintf(mc.log, "%s %s: %s\n", time.Now().UTC().Format(time.RFC3339), mc.step, line)
}

// path is a file under the machine's directory.
func (mc *machine) path(elem ...string) string {
	return filepath.Join(append([]string{mc.m.Dir}, elem...)...)
}

// powerOn starts the machine's swtpm and replays the boot's event log into its PCRs, as the
// firmware measures the boot. It returns the running TPM and the event log file the agent reads.
func (mc *machine) powerOn(ctx context.Context, eventLog []byte) (*swtpm.Instance, string, error) {
	logPath := mc.path(MachineSysDir, eventLogPath)
	if eventLog != nil {
		logPath = mc.path("boot-event-log")
		if err := os.WriteFile(logPath, eventLog, 0o600); err != nil {
			return nil, "", fmt.Errorf("power on %s: %w", mc.name, err)
		}
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		return nil, "", fmt.Errorf("power on %s: read its boot's event log: %w", mc.name, err)
	}
	tpm, err := swtpm.Start(ctx, mc.path(MachineTPMDir))
	if err != nil {
		return nil, "", fmt.Errorf("power on %s: %w", mc.name, err)
	}
	if err := tpm.ReplayEventLog(b); err != nil {
		return nil, "", errors.Join(fmt.Errorf("power on %s: measure the boot: %w", mc.name, err), tpm.Stop())
	}
	mc.say("powered on: swtpm at %s, PCRs hold the measured boot (%d bytes of event log)", tpm.Addr(), len(b))
	return tpm, logPath, nil
}

// httpClient is an HTTP client whose connections come from the machine's NetBox address: fleetd
// serves a configuration only to a request from the device's address (docs/design.md §6). It
// trusts the stack's fleetd CA, as the machine's OS image does.
func (mc *machine) httpClient() (*http.Client, error) {
	p, err := netip.ParsePrefix(mc.m.Address)
	if err != nil {
		return nil, fmt.Errorf("machine %s: its address %q: %w", mc.name, mc.m.Address, err)
	}
	cfg, err := FleetdTLS(mc.info)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: p.Addr().AsSlice()}, Timeout: 10 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true, TLSClientConfig: cfg}
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}, nil
}

// env is the environment of a process the machine runs: only what is given, and a PATH.
func env(vars map[string]string) []string {
	out := []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	return out
}

// relay gives a process that cannot choose its source address (the agent, `fleetd boot-check`)
// the machine's network (see Relay). It returns the URL to use instead of fleetd's and a
// function that stops the relay.
func (mc *machine) relay() (string, func(), error) {
	p, err := netip.ParsePrefix(mc.m.Address)
	if err != nil {
		return "", nil, fmt.Errorf("machine %s: its address %q: %w", mc.name, mc.m.Address, err)
	}
	u, err := url.Parse(mc.info.Fleetd.URL)
	if err != nil {
		return "", nil, fmt.Errorf("fleetd URL %q: %w", mc.info.Fleetd.URL, err)
	}
	addr, stop, err := Relay(p.Addr(), u.Host)
	if err != nil {
		return "", nil, fmt.Errorf("machine %s: %w", mc.name, err)
	}
	return u.Scheme + "://" + addr, stop, nil
}

// Relay forwards TCP connections to target from the source address from: it listens on a free
// port of 127.0.0.1 and dials target from `from` for each connection, so fleetd sees `from` as
// the peer, as on the machine's own network (fleetd limits and checks node requests per source
// address). It listens on 127.0.0.1, not on `from`, so that a TLS client of the relay verifies
// fleetd's certificate (issued for 127.0.0.1) unchanged. It returns the relay's host:port and a
// function that stops it and waits for its connections to end.
func Relay(from netip.Addr, target string) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("listen for a relay from %s: %w", from, err)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}, Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				forward(c, d, target)
			}()
		}
	}()
	stop := func() {
		l.Close()
		wg.Wait()
	}
	return l.Addr().String(), stop, nil
}

// forward copies one connection to target and back until both directions end.
func forward(c net.Conn, d *net.Dialer, target string) {
	defer c.Close()
	up, err := d.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(c, up)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	<-done
}
