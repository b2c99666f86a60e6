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

// FleetdRestart is what a restart did to one instance (1-based): the pid it stopped and the pid
// that is ready now.
type FleetdRestart struct{ Instance, OldPID, NewPID int }

// RestartFleetd restarts every fleetd instance the way a reboot of spore would (docs/design.md
// §8): SIGTERM to each running process; the supervisors of `fleetsim up` start new ones a second
// later; this waits until every new process is ready. Nothing is lost (docs/design.md §9). It
// works from any process that has read stack.json.
func RestartFleetd(ctx context.Context, info Info) ([]FleetdRestart, error) {
	all := info.Fleetd.instances()
	out := make([]FleetdRestart, len(all))
	for k, in := range all {
		pid, err := signalInstance(in, syscall.SIGTERM)
		if err != nil {
			return nil, err
		}
		out[k] = FleetdRestart{Instance: k + 1, OldPID: pid}
	}
	for k, in := range all {
		pid, err := waitNewInstance(ctx, info, in, out[k].OldPID)
		if err != nil {
			return nil, err
		}
		out[k].NewPID = pid
	}
	return out, waitFleetdReady(ctx, info)
}

// RestartFleetdInstance restarts instance k (1-based) only; the others keep serving, and with
// several instances the front hands them the connections while k is down.
func RestartFleetdInstance(ctx context.Context, info Info, k int) (FleetdRestart, error) {
	in, err := info.Fleetd.instance(k)
	if err != nil {
		return FleetdRestart{}, err
	}
	old, err := signalInstance(in, syscall.SIGTERM)
	if err != nil {
		return FleetdRestart{}, err
	}
	pid, err := waitNewInstance(ctx, info, in, old)
	return FleetdRestart{Instance: k, OldPID: old, NewPID: pid}, err
}

// SignalFleetd sends sig to instance k (1-based; its pid from its pid file) and returns the pid.
func SignalFleetd(info Info, k int, sig syscall.Signal) (int, error) {
	in, err := info.Fleetd.instance(k)
	if err != nil {
		return 0, err
	}
	return signalInstance(in, sig)
}

func signalInstance(in FleetdInstance, sig syscall.Signal) (int, error) {
	pid, err := readPID(in.PIDFile)
	if err != nil {
		return 0, err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return 0, fmt.Errorf("signal fleetd (pid %d from %s): %w; is `fleetsim up` still running?", pid, in.PIDFile, err)
	}
	return pid, nil
}

// waitNewInstance waits until the instance's pid file names a process other than oldPID and the
// instance is ready.
func waitNewInstance(ctx context.Context, info Info, in FleetdInstance, oldPID int) (int, error) {
	pid, err := waitNewPID(ctx, in, oldPID)
	if err != nil {
		return 0, err
	}
	return pid, waitInstanceReady(ctx, info, in)
}

// waitNewPID waits until the instance's pid file names a live process other than oldPID.
func waitNewPID(ctx context.Context, in FleetdInstance, oldPID int) (int, error) {
	ctx, cancel := withDefaultTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		pid, err := readPID(in.PIDFile)
		if err == nil && pid != oldPID && syscall.Kill(pid, 0) == nil {
			return pid, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for a new fleetd: none started after pid %d (%w); is `fleetsim up` still running? last lines of %s:\n%s",
				oldPID, ctx.Err(), in.Log, logTail(in.Log, 10))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitFleetdReady waits until every instance is ready (its https URL's /readyz) and, with
// several, the front answers too.
func waitFleetdReady(ctx context.Context, info Info) error { return waitFleetd(ctx, info, "/readyz") }

// waitFleetd waits until every instance and, with several, the front answer 200 on their https
// URL's path and their plain listener's /healthz.
func waitFleetd(ctx context.Context, info Info, path string) error {
	all := info.Fleetd.instances()
	for _, in := range all {
		if err := waitURLs(ctx, info, in.URL+path, in.HTTPURL, in.Log); err != nil {
			return err
		}
	}
	if len(all) > 1 {
		return waitURLs(ctx, info, info.Fleetd.URL+path, info.Fleetd.HTTPURL, all[0].Log)
	}
	return nil
}

// waitInstanceReady polls GET /readyz on the instance's https URL (trusting the stack's CA)
// until it answers 200, and then its plain listener's /healthz, where NetBox's webhooks arrive.
func waitInstanceReady(ctx context.Context, info Info, in FleetdInstance) error {
	return waitURLs(ctx, info, in.URL+"/readyz", in.HTTPURL, in.Log)
}

// waitURLs polls httpsURL (trusting the stack's CA), then httpURL's /healthz, until each answers
// 200.
func waitURLs(ctx context.Context, info Info, httpsURL, httpURL, logPath string) error {
	ctx, cancel := withDefaultTimeout(ctx, readyTimeout)
	defer cancel()
	c, err := FleetdClient(info, 5*time.Second)
	if err != nil {
		return fmt.Errorf("wait for fleetd: %w", err)
	}
	for _, u := range []string{httpsURL, httpURL + "/healthz"} {
		if err := pollOK(ctx, c, u, logPath); err != nil {
			return err
		}
	}
	return nil
}

// pollOK GETs u until it answers 200 or ctx ends.
func pollOK(ctx context.Context, c *http.Client, u, logPath string) error {
	var last string // every pass sets it before the wait that reports it
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

// RestartFleetd restarts every fleetd instance (see the package function).
func (s *Stack) RestartFleetd(ctx context.Context) ([]FleetdRestart, error) {
	return RestartFleetd(ctx, s.info)
}

// RestartFleetdInstance restarts instance k (1-based) only (see the package function).
func (s *Stack) RestartFleetdInstance(ctx context.Context, k int) (FleetdRestart, error) {
	return RestartFleetdInstance(ctx, s.info, k)
}

// KillFleetd sends sig to fleetd's first instance (SIGKILL: a crash) and returns its pid; the
// supervisor starts a new one a second after it exits.
func (s *Stack) KillFleetd(sig syscall.Signal) (int, error) { return SignalFleetd(s.info, 1, sig) }

// KillFleetdInstance sends sig to instance k (1-based) and returns its pid.
func (s *Stack) KillFleetdInstance(k int, sig syscall.Signal) (int, error) {
	return SignalFleetd(s.info, k, sig)
}

// WaitNewFleetd waits until a first instance other than oldPID runs, without waiting for
// readiness (which needs NetBox and Kubernetes), and returns its pid.
func (s *Stack) WaitNewFleetd(ctx context.Context, oldPID int) (int, error) {
	return s.WaitNewFleetdInstance(ctx, 1, oldPID)
}

// WaitNewFleetdInstance is WaitNewFleetd for instance k (1-based).
func (s *Stack) WaitNewFleetdInstance(ctx context.Context, k, oldPID int) (int, error) {
	in, err := s.info.Fleetd.instance(k)
	if err != nil {
		return 0, err
	}
	return waitNewPID(ctx, in, oldPID)
}

// WaitFleetdReady waits until every fleetd instance answers /readyz with 200.
func (s *Stack) WaitFleetdReady(ctx context.Context) error {
	return waitFleetdReady(ctx, s.info)
}

// WaitFleetdServing waits until every fleetd instance (and, with several, the front) serves:
// /healthz answers 200 on its https URL, where nodes check, and on its plain listener. Unlike
// WaitFleetdReady it does not wait for NetBox and the Kubernetes API, which a fault may hold
// down while the nodes' checks go on.
func (s *Stack) WaitFleetdServing(ctx context.Context) error {
	return waitFleetd(ctx, s.info, "/healthz")
}

// ReconfigureFleetd rewrites fleetd.yaml from the stack's options with change applied (the
// options of fleetd.yaml only: certificate lifetimes, the inventory's window, timeouts) and
// restarts every fleetd instance with it (RestartFleetd). It returns a function that writes the
// options as they were and restarts fleetd again. stack.json is not rewritten. When the restart
// fails, fleetd.yaml is put back and fleetd restarted with it before the error is returned, so
// that the tests sharing the stack do not run on a configuration no one restores.
func (s *Stack) ReconfigureFleetd(ctx context.Context, change func(*Options)) (restore func(context.Context) error, err error) {
	s.confMu.Lock()
	before := s.conf
	s.confMu.Unlock()
	// apply writes c and restarts fleetd; written says whether fleetd.yaml now holds c.
	apply := func(ctx context.Context, c fleetdConfig) (written bool, err error) {
		s.confMu.Lock()
		defer s.confMu.Unlock()
		if err := writeFleetdYAML(s.paths, c); err != nil {
			return false, err
		}
		s.conf = c
		_, err = RestartFleetd(ctx, s.info)
		return true, err
	}
	restore = func(ctx context.Context) error {
		if _, err := apply(ctx, before); err != nil {
			return fmt.Errorf("restore fleetd's configuration: %w", err)
		}
		return nil
	}
	next := before
	change(&next.opts)
	if written, err := apply(ctx, next); err != nil {
		if !written {
			return nil, fmt.Errorf("reconfigure fleetd: %w", err)
		}
		if rerr := restore(ctx); rerr != nil {
			return nil, fmt.Errorf("reconfigure fleetd: %w; then %v", err, rerr)
		}
		return nil, fmt.Errorf("reconfigure fleetd: %w (its configuration was put back and fleetd restarted with it)", err)
	}
	return restore, nil
}
