package stack

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// readyTimeout bounds a wait for fleetd's readiness when the caller's context has no deadline.
const readyTimeout = 90 * time.Second

// RestartFleetd restarts the stack's fleetd the way a reboot of spore would (docs/design.md §8): SIGTERM
// to the running process; the supervisor of `fleetsim up` starts a new one a second later; this
// waits until the new process is ready. Nothing is lost (docs/design.md §9). It works
// from any process that has read stack.json.
func RestartFleetd(ctx context.Context, info Info) (oldPID, newPID int, err error) {
	oldPID, err = SignalFleetd(info, syscall.SIGTERM)
	if err != nil {
		return 0, 0, err
	}
	newPID, err = waitNewFleetd(ctx, info, oldPID)
	return oldPID, newPID, err
}

// SignalFleetd sends sig to the running fleetd (its pid from the pid file) and returns the pid.
func SignalFleetd(info Info, sig syscall.Signal) (int, error) {
	pid, err := readPID(info.Fleetd.PIDFile)
	if err != nil {
		return 0, err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return 0, fmt.Errorf("signal fleetd (pid %d from %s): %w; is `fleetsim up` still running?", pid, info.Fleetd.PIDFile, err)
	}
	return pid, nil
}

// waitNewFleetd waits until the pid file names a process other than oldPID and fleetd is ready.
func waitNewFleetd(ctx context.Context, info Info, oldPID int) (int, error) {
	pid, err := waitNewPID(ctx, info, oldPID)
	if err != nil {
		return 0, err
	}
	return pid, waitFleetdReady(ctx, info)
}

// waitNewPID waits until the pid file names a live process other than oldPID.
func waitNewPID(ctx context.Context, info Info, oldPID int) (int, error) {
	ctx, cancel := withDefaultTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		pid, err := readPID(info.Fleetd.PIDFile)
		if err == nil && pid != oldPID && syscall.Kill(pid, 0) == nil {
			return pid, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for a new fleetd: none started after pid %d (%w); is `fleetsim up` still running? last lines of %s:\n%s",
				oldPID, ctx.Err(), info.Fleetd.Log, logTail(info.Fleetd.Log, 10))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitFleetdReady polls GET /readyz on fleetd's https URL (trusting the stack's CA) until it
// answers 200, and then its plain listener's /healthz, where NetBox's webhooks arrive.
func waitFleetdReady(ctx context.Context, info Info) error {
	ctx, cancel := withDefaultTimeout(ctx, readyTimeout)
	defer cancel()
	c, err := FleetdClient(info, 5*time.Second)
	if err != nil {
		return fmt.Errorf("wait for fleetd: %w", err)
	}
	for _, u := range []string{info.Fleetd.URL + "/readyz", info.Fleetd.HTTPURL + "/healthz"} {
		if err := pollOK(ctx, c, u, info.Fleetd.Log); err != nil {
			return err
		}
	}
	return nil
}

// pollOK GETs u until it answers 200 or ctx ends.
func pollOK(ctx context.Context, c *http.Client, u, logPath string) error {
	last := "no answer yet"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return fmt.Errorf("wait for fleetd: %w", err)
		}
		resp, err := c.Do(req)
		if err == nil {
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(body.String()))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for fleetd at %s to answer 200: %w (last answer: %s); last lines of %s:\n%s",
				u, ctx.Err(), last, logPath, logTail(logPath, 10))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read fleetd's pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("read fleetd's pid: %s holds %q, not a pid", path, strings.TrimSpace(string(b)))
	}
	return pid, nil
}

// logTail returns the last n lines of a log file, for error messages.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// RestartFleetd restarts the stack's fleetd (see the package function).
func (s *Stack) RestartFleetd(ctx context.Context) (oldPID, newPID int, err error) {
	return RestartFleetd(ctx, s.info)
}

// KillFleetd sends sig to fleetd (SIGKILL: a crash) and returns its pid; the supervisor starts
// a new one a second after it exits.
func (s *Stack) KillFleetd(sig syscall.Signal) (int, error) { return SignalFleetd(s.info, sig) }

// WaitNewFleetd waits until a fleetd other than oldPID runs, without waiting for readiness
// (which needs NetBox and Kubernetes), and returns its pid.
func (s *Stack) WaitNewFleetd(ctx context.Context, oldPID int) (int, error) {
	return waitNewPID(ctx, s.info, oldPID)
}

// WaitFleetdReady waits until fleetd answers /readyz with 200.
func (s *Stack) WaitFleetdReady(ctx context.Context) error {
	return waitFleetdReady(ctx, s.info)
}
