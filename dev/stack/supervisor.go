package stack

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// restartDelay is how long the supervisor waits before starting fleetd again (systemd's
// RestartSec=1 with Restart=always).
const restartDelay = time.Second

// supervisorConfig says how to run fleetd.
type supervisorConfig struct {
	binary, config, logPath, pidPath string
	args                             []string // after serve --config: an instance's own listeners
	instance                         int      // 1-based, for the stack's log
	log                              zerolog.Logger
}

// supervisor runs `fleetd serve` as a child process the way systemd's Restart=always does:
// whenever it exits, for whatever reason, it is started again after restartDelay. Its output is
// appended to the log file and its pid written to the pid file on every start.
type supervisor struct {
	cfg  supervisorConfig
	done chan struct{}

	mu      sync.Mutex
	stopped bool
	proc    *os.Process // the running fleetd, nil between runs
	stopCh  chan struct{}
}

func startSupervisor(cfg supervisorConfig) *supervisor {
	s := &supervisor{cfg: cfg, done: make(chan struct{}), stopCh: make(chan struct{})}
	go s.loop()
	return s
}

func (s *supervisor) loop() {
	defer close(s.done)
	for {
		if err := s.runOnce(); err != nil {
			s.cfg.log.Error().Err(err).Int("instance", s.cfg.instance).Msg("fleetd did not start")
		}
		select {
		case <-s.stopCh:
			return
		case <-time.After(restartDelay):
		}
	}
}

// runOnce starts fleetd and waits for it to exit. It starts nothing once stop was called.
func (s *supervisor) runOnce() error {
	logf, err := os.OpenFile(s.cfg.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open fleetd's log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(s.cfg.binary, append([]string{"serve", "--config", s.cfg.config}, s.cfg.args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// fleetd must not outlive the stack, even when fleetsim itself is killed. The parent-death
	// signal follows the thread that forked, so that thread stays this goroutine's until Wait.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("start %s: %w", s.cfg.binary, err)
	}
	s.proc = cmd.Process
	s.mu.Unlock()
	if err := writeFileAtomic(s.cfg.pidPath, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		s.cfg.log.Error().Err(err).Int("instance", s.cfg.instance).Msg("fleetd's pid file not written")
	}
	s.cfg.log.Info().Int("instance", s.cfg.instance).Int("pid", cmd.Process.Pid).Msg("fleetd started")
	err = cmd.Wait()
	s.mu.Lock()
	s.proc = nil
	stopped := s.stopped
	s.mu.Unlock()
	if !stopped {
		s.cfg.log.Warn().Err(err).Int("instance", s.cfg.instance).Dur("restart_in", restartDelay).Msg("fleetd exited; starting it again")
	}
	return nil
}

// pid is the running fleetd's pid, 0 between runs.
func (s *supervisor) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid
}

// stop ends supervision: SIGTERM to fleetd (SIGKILL after 15 s) and no restart.
func (s *supervisor) stop() error {
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		close(s.stopCh)
	}
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		_ = p.Signal(syscall.SIGTERM)
	}
	select {
	case <-s.done:
		return nil
	case <-time.After(15 * time.Second):
	}
	if p != nil {
		_ = p.Kill()
	}
	<-s.done
	return errors.New("stop fleetd: it did not exit within 15 s of SIGTERM and was killed")
}
