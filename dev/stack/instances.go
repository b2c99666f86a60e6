package stack

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
)

// maxFleetdInstances bounds Options.FleetdInstances: the stack runs on a developer's machine.
const maxFleetdInstances = 8

// instances describes the fleetd processes: one listening on fleetd's URLs themselves, or
// several on ports of their own behind the front on those URLs.
func (s *Stack) instances(fleetdURL, httpURL string) ([]FleetdInstance, error) {
	n := s.opts.FleetdInstances
	out := make([]FleetdInstance, n)
	for k := 1; k <= n; k++ {
		in := &out[k-1]
		in.PIDFile, in.Log = s.paths.instanceFiles(k)
		if s.opts.DebugListen {
			var err error
			if in.DebugURL, err = freeLoopbackURL("http"); err != nil {
				return nil, err
			}
		}
		if n == 1 {
			in.URL, in.HTTPURL = fleetdURL, httpURL
			continue
		}
		var err error
		if in.URL, err = freeLoopbackURL("https"); err != nil {
			return nil, err
		}
		if in.HTTPURL, err = freeLoopbackURL("http"); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// startFleetd starts the front (with several instances) and a supervisor per instance. Every
// instance runs `fleetd serve` on the one fleetd.yaml, whose listen addresses are the front's:
// an instance behind the front is given its own with --listen-https and --listen-http.
func (s *Stack) startFleetd(fleetdURL, httpURL string) error {
	all := s.info.Fleetd.instances()
	if len(all) > 1 {
		for _, u := range []string{fleetdURL, httpURL} {
			addr, backends, err := frontAddrs(u, all)
			if err != nil {
				return err
			}
			f, err := startFront(addr, backends, s.opts.Logger)
			if err != nil {
				return err
			}
			s.front = append(s.front, f)
		}
	}
	s.supMu.Lock()
	defer s.supMu.Unlock()
	s.sups = make([]*supervisor, len(all))
	for k := range all {
		s.sups[k] = startSupervisor(s.supervisorConfig(k + 1))
	}
	return nil
}

// frontAddrs is the front's listen address for fleetd URL u and the instances' addresses of the
// same scheme.
func frontAddrs(u string, all []FleetdInstance) (string, []string, error) {
	host := func(raw string) (string, error) {
		p, err := url.Parse(raw)
		if err != nil {
			return "", fmt.Errorf("start the front of fleetd's instances: %q: %w", raw, err)
		}
		return p.Host, nil
	}
	addr, err := host(u)
	if err != nil {
		return "", nil, err
	}
	https := len(u) > 5 && u[:6] == "https:"
	var backends []string
	for _, in := range all {
		b := in.HTTPURL
		if https {
			b = in.URL
		}
		h, err := host(b)
		if err != nil {
			return "", nil, err
		}
		backends = append(backends, h)
	}
	return addr, backends, nil
}

// supervisorConfig is how instance k (1-based) is run.
func (s *Stack) supervisorConfig(k int) supervisorConfig {
	in := s.info.Fleetd.instances()[k-1]
	cfg := supervisorConfig{binary: s.opts.FleetdBinary, config: s.paths.fleetdConfig,
		logPath: in.Log, pidPath: in.PIDFile, instance: k, log: s.opts.Logger}
	if len(s.info.Fleetd.instances()) > 1 {
		https, _ := url.Parse(in.URL)
		plain, _ := url.Parse(in.HTTPURL)
		cfg.args = []string{"--listen-https", https.Host, "--listen-http", plain.Host}
	}
	if in.DebugURL != "" {
		u, _ := url.Parse(in.DebugURL)
		cfg.args = append(cfg.args, "--debug-listen", u.Host)
	}
	return cfg
}

// FleetdInstances is how many fleetd processes the stack runs.
func (s *Stack) FleetdInstances() int { return len(s.info.Fleetd.instances()) }

// FleetdInstancePID is the pid of instance k (1-based), 0 while it is restarting or stopped.
func (s *Stack) FleetdInstancePID(k int) int {
	if sup := s.supervisor(k); sup != nil {
		return sup.pid()
	}
	return 0
}

// supervisor is instance k's supervisor (1-based), nil when there is none.
func (s *Stack) supervisor(k int) *supervisor {
	s.supMu.Lock()
	defer s.supMu.Unlock()
	if k < 1 || k > len(s.sups) {
		return nil
	}
	return s.sups[k-1]
}

// StopFleetdInstance stops instance k (1-based) and its supervision, as an operator stops one
// spore for maintenance: the front hands its connections to the others until
// StartFleetdInstance. The stack must run at least one other instance.
func (s *Stack) StopFleetdInstance(k int) error {
	sup := s.supervisor(k)
	if sup == nil || s.FleetdInstances() < 2 {
		return fmt.Errorf("stop fleetd instance %d: the stack runs %d instances, and one must stay", k, s.FleetdInstances())
	}
	return sup.stop()
}

// StartFleetdInstance starts instance k (1-based) again after StopFleetdInstance, without waiting
// for it to be ready (WaitFleetdReady).
func (s *Stack) StartFleetdInstance(k int) error {
	s.supMu.Lock()
	defer s.supMu.Unlock()
	if k < 1 || k > len(s.sups) {
		return fmt.Errorf("start fleetd instance %d: the stack runs %d instances", k, len(s.sups))
	}
	select {
	case <-s.sups[k-1].done:
	default:
		return fmt.Errorf("start fleetd instance %d: it runs (stop it first with StopFleetdInstance)", k)
	}
	s.sups[k-1] = startSupervisor(s.supervisorConfig(k))
	return nil
}

// StopFleetd stops every fleetd instance and its supervision, as when spore is down: nothing
// answers on fleetd's URLs, nor on its authorization webhook, until StartFleetd.
func (s *Stack) StopFleetd() error {
	s.supMu.Lock()
	sups := slices.Clone(s.sups)
	s.supMu.Unlock()
	var errs []error
	for _, sup := range sups {
		errs = append(errs, sup.stop())
	}
	return errors.Join(errs...)
}

// StartFleetd starts every instance StopFleetd stopped and returns once each is ready.
func (s *Stack) StartFleetd(ctx context.Context) error {
	for k := 1; k <= s.FleetdInstances(); k++ {
		if err := s.StartFleetdInstance(k); err != nil {
			return err
		}
	}
	return waitFleetdReady(ctx, s.info)
}
