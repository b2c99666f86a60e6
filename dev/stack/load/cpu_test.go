package load_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100 on every Linux
// architecture (the kernel converts to it for user space whatever its own tick rate).
const userHZ = 100

// cpuUse is the CPU time (user and system) each process of the stack has spent so far, by name:
// "load test" is this process, which runs the NetBox emulator, the Kubernetes API server and etcd;
// the others are its children by their command name (fleetd, tink-controller, tink-server,
// swtpm, tink-worker), those of one name summed.
type cpuUse map[string]time.Duration

// readCPU reads cpuUse from /proc. A child that ended between the listing and its read is left
// out: its time is gone with it.
func readCPU() (cpuUse, error) {
	self := os.Getpid()
	use := cpuUse{}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		name, ppid, t, err := procStat(pid)
		switch {
		case err != nil:
			continue
		case pid == self:
			use["load test"] += t
		case ppid == self:
			use[name] += t
		}
	}
	if _, ok := use["load test"]; !ok {
		return nil, fmt.Errorf("read /proc/%d/stat: this process is not in /proc", self)
	}
	return use, nil
}

// procStat reads a process's command name, parent and CPU time from /proc/<pid>/stat.
func procStat(pid int) (name string, ppid int, cpu time.Duration, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, 0, err
	}
	// pid (comm) state ppid ... utime(14) stime(15): comm may hold spaces and parentheses.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return "", 0, 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return "", 0, 0, err
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, fmt.Errorf("/proc/%d/stat: CPU times %q %q", pid, f[11], f[12])
	}
	return s[open+1 : end], ppid, time.Duration(utime+stime) * time.Second / userHZ, nil
}

// cpuPhase measures what each process spent during one phase, with the wall time it took.
type cpuPhase struct {
	start   cpuUse
	began   time.Time
	profile *os.File // this process's CPU profile, when LOAD_PROFILE_DIR is set
}

// startCPU begins a phase; name names the profile file.
func startCPU(name string) (*cpuPhase, error) {
	p := &cpuPhase{began: time.Now()}
	var err error
	if p.start, err = readCPU(); err != nil {
		return nil, err
	}
	if dir := os.Getenv("LOAD_PROFILE_DIR"); dir != "" {
		if p.profile, err = os.Create(filepath.Join(dir, name+".cpu.pprof")); err != nil {
			return nil, fmt.Errorf("LOAD_PROFILE_DIR: %w", err)
		}
		if err := pprof.StartCPUProfile(p.profile); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// stop ends the phase and says, per process, the CPU time it spent and the share of the two
// cores' time the phase had ("fleetd 9.1 s"), and the total against what the machine had.
func (p *cpuPhase) stop() string {
	if p.profile != nil {
		pprof.StopCPUProfile()
		p.profile.Close()
	}
	wall := time.Since(p.began)
	end, err := readCPU()
	if err != nil {
		return "CPU: " + err.Error()
	}
	type spent struct {
		name string
		d    time.Duration
	}
	var all []spent
	var total time.Duration
	for name, d := range end {
		if d -= p.start[name]; d > 0 {
			all = append(all, spent{name, d})
			total += d
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].d > all[j].d })
	parts := make([]string, len(all))
	for i, s := range all {
		parts[i] = fmt.Sprintf("%s %.1f s", s.name, s.d.Seconds())
	}
	cores := float64(runtime.NumCPU())
	return fmt.Sprintf("CPU over %.1f s of wall time (%.0f CPU-s on %d cores): %s; total %.1f s (%.0f%% of the cores' time)",
		wall.Seconds(), cores*wall.Seconds(), int(cores), strings.Join(parts, ", "), total.Seconds(), 100*total.Seconds()/(cores*wall.Seconds()))
}

// TestReadCPU: the CPU reading finds this process and a child by its command name, and the
// child's time grows while it works (the load test's phases are read this way).
func TestReadCPU(t *testing.T) {
	name, ppid, _, err := procStat(os.Getpid())
	if err != nil || name == "" || ppid != os.Getppid() {
		t.Fatalf("procStat(self) = %q, parent %d, %v; want a name and parent %d", name, ppid, err, os.Getppid())
	}
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 5")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for {
		use, err := readCPU()
		if err != nil {
			t.Fatal(err)
		}
		if use["sh"] > 0 && use["load test"] > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute the child sh has spent no CPU time in the reading: %v", use)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
