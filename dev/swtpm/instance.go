package swtpm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-tpm/legacy/tpm2"

	"github.com/folly-infra/fleetd/agent/tpmconn"
)

// startAttempts bounds how often Start retries a swtpm that failed to start.
const startAttempts = 5

// Instance is a running swtpm serving one manufactured TPM on loopback TCP.
type Instance struct {
	dir  string
	addr string
	ctrl string // the control channel, "127.0.0.1:PORT", a socket this process bound (startOnce)
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{} // closed when the process exited
	err  error         // the process's exit error, valid after done

	stopOnce sync.Once
}

// Start runs `swtpm socket` for the TPM manufactured in dir, on two free loopback ports (data
// and control). The TPM starts as after a power-on (startup-clear): PCRs are reset, persistent
// objects and NV are kept. The process ends with Stop, or when the caller's process dies.
func Start(ctx context.Context, dir string) (*Instance, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("start swtpm: resolve %s: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, stateDir, "tpm2-00.permall")); err != nil {
		return nil, fmt.Errorf("start swtpm in %s: %w", dir, errNotManufactured)
	}
	var lastErr error
	for range startAttempts {
		inst, err := startOnce(ctx, dir)
		if err == nil {
			return inst, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startOnce(ctx context.Context, dir string) (*Instance, error) {
	// The control channel is a socket this process bound and swtpm inherits. The data port is
	// picked and released before swtpm binds it, so another process (another machine's swtpm, an
	// outgoing connection on a busy machine) may take it meanwhile: then swtpm cannot bind and
	// exits, and a probe of the data port would reach the other listener and call ready a swtpm
	// that never bound, whose first command then reads EOF. swtpm serves its control channel only
	// once its data port is bound, so an answer there is the readiness test (waitReady).
	ports, err := pickPorts(1)
	if err != nil {
		return nil, err
	}
	ctrl, ctrlFile, err := listenLoopback()
	if err != nil {
		return nil, err
	}
	defer ctrlFile.Close()
	cmd := exec.Command("swtpm", "socket", "--tpm2",
		"--tpmstate", "dir="+filepath.Join(dir, stateDir),
		"--server", "type=tcp,bindaddr=127.0.0.1,port="+strconv.Itoa(ports[0]),
		"--ctrl", "type=tcp,fd=3",
		"--flags", "not-need-init,startup-clear")
	cmd.ExtraFiles = []*os.File{ctrlFile}
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// End swtpm with the process that started it, so a crashed test leaves nothing behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start swtpm: %w", err)
	}
	ctrlFile.Close() // swtpm holds the listening socket now
	inst := &Instance{dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), ctrl: ctrl,
		cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		inst.err = cmd.Wait()
		close(inst.done)
	}()
	if err := inst.waitReady(ctx); err != nil {
		return nil, errors.Join(err, inst.Stop())
	}
	return inst, nil
}

// waitReady asks swtpm's control channel for its capabilities (CMD_GET_CAPABILITY) until it
// answers or swtpm exits. swtpm answers there only after it bound its data port, so a data port
// that another process took makes swtpm exit instead of passing (see startOnce).
func (i *Instance) waitReady(ctx context.Context) error {
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if i.ctrlAnswers() {
			return nil
		}
		select {
		case <-i.done:
			return fmt.Errorf("start swtpm in %s: it exited (%v): %s", i.dir, i.err, lastLines(i.out.String(), 3))
		case <-ctx.Done():
			return fmt.Errorf("start swtpm in %s: %w", i.dir, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("start swtpm in %s: its control channel %s did not answer within 10s", i.dir, i.ctrl)
		case <-tick.C:
		}
	}
}

// ctrlAnswers sends CMD_GET_CAPABILITY (1) on the control channel and reads its 8-byte answer.
func (i *Instance) ctrlAnswers() bool {
	c, err := net.DialTimeout("tcp", i.ctrl, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte{0, 0, 0, 1}); err != nil {
		return false
	}
	_, err = io.ReadFull(c, make([]byte, 8))
	return err == nil
}

// Addr is the data channel's "127.0.0.1:PORT".
func (i *Instance) Addr() string { return i.addr }

// Spec is the TPM spec the agent takes for this instance ("swtpm:127.0.0.1:PORT").
func (i *Instance) Spec() string { return tpmconn.SwtpmPrefix + i.addr }

// Open connects a new command channel to the instance. Close it before another client needs
// the TPM: swtpm serves one connection at a time.
func (i *Instance) Open() (io.ReadWriteCloser, error) {
	return tpmconn.DialSwtpm(i.addr)
}

// Stop shuts the TPM down in order (TPM2_Shutdown, as an operating system does before a
// reboot), ends swtpm (SIGTERM, then SIGKILL after 5 s) and waits for it. The TPM's permanent
// state stays in its directory. Without the orderly shutdown a TPM counts every restart as a
// possible attack on its dictionary-attack protection and soon locks its keys out. Close every
// connection to the instance before Stop. Stop is idempotent.
func (i *Instance) Stop() error {
	var err error
	i.stopOnce.Do(func() {
		select {
		case <-i.done:
			return
		default:
		}
		i.shutdown()
		_ = i.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-i.done:
		case <-time.After(5 * time.Second):
			_ = i.cmd.Process.Kill()
			<-i.done
			err = fmt.Errorf("stop swtpm in %s: it ignored SIGTERM and was killed", i.dir)
		}
	})
	return err
}

// shutdown sends TPM2_Shutdown(CLEAR), giving up after 3 s (a client still connected keeps
// swtpm from answering; SIGTERM follows anyway).
func (i *Instance) shutdown() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		rw, err := i.Open()
		if err != nil {
			return
		}
		defer rw.Close()
		_ = tpm2.Shutdown(rw, tpm2.StartupClear)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
	}
}

// listenLoopback binds a listening socket on a free loopback port and returns its address and
// the socket as a file for swtpm to inherit (the listener itself is closed; the file keeps the
// socket).
func listenLoopback() (string, *os.File, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("start swtpm: listen on a free loopback port: %w", err)
	}
	defer l.Close()
	tl, ok := l.(*net.TCPListener)
	if !ok {
		return "", nil, fmt.Errorf("start swtpm: unexpected listener %T", l)
	}
	f, err := tl.File()
	if err != nil {
		return "", nil, fmt.Errorf("start swtpm: the listening socket as a file: %w", err)
	}
	return l.Addr().String(), f, nil
}

// lockedBuffer collects swtpm's output for error messages.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freePorts asks the kernel for n free loopback ports. Another process may take one before swtpm
// binds it; Start then retries with new ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free loopback port: %w", err)
		}
		ls = append(ls, l)
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			return nil, fmt.Errorf("find a free loopback port: unexpected address %v", l.Addr())
		}
		ports = append(ports, addr.Port)
	}
	return ports, nil
}

// pickPorts is freePorts; a test makes it return a port another process holds.
var pickPorts = freePorts
