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
// the others are its running children by their command name (fleetd, tinkerbell, swtpm,
// tink-agent; with v0.12.2 tink-controller, tink-server and tink-worker), those of one name
// summed, and endedChildren the children that ended and were waited for (the kernel adds their
// time to this process's cutime and cstime): most swtpm, worker and `fleetd boot-check` processes live inside one phase, and
// without them a phase's total would leave out much of what the machine did.
type cpuUse map[string]time.Duration

// endedChildren is the cpuUse of the children that ended. A child that ended during a phase
// counts there whole, the part it spent before the phase too.
const endedChildren = "ended children"

// readCPU reads cpuUse from /proc. A child that ended between the listing and its read is left
// out of its name; its time is in endedChildren once it was waited for.
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
		name, ppid, t, reaped, err := procStat(pid)
		switch {
		case err != nil:
			continue
		case pid == self:
			use["load test"] += t
			use[endedChildren] += reaped
		case ppid == self:
			use[name] += t
		}
	}
	if _, ok := use["load test"]; !ok {
		return nil, fmt.Errorf("read /proc/%d/stat: this process is not in /proc", self)
	}
	return use, nil
}

// statFields reads /proc/<pid>/stat: the command name, and the fields after it from the state
// (field 3) on, at least least of them.
func statFields(pid, least int) (name string, f []string, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", nil, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f = strings.Fields(s[end+1:])
	if len(f) < least {
		return "", nil, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	return s[open+1 : end], f, nil
}

// procStat reads a process's command name, parent, CPU time and the CPU time of its children
// that ended and were waited for, from /proc/<pid>/stat.
func procStat(pid int) (name string, ppid int, cpu, reaped time.Duration, err error) {
	// utime(14) stime(15) cutime(16) cstime(17): f[11:15].
	name, f, err := statFields(pid, 15)
	if err != nil {
		return "", 0, 0, 0, err
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return "", 0, 0, 0, err
	}
	var ticks [4]int64 // utime, stime, cutime, cstime
	for i := range ticks {
		if ticks[i], err = strconv.ParseInt(f[11+i], 10, 64); err != nil {
			return "", 0, 0, 0, fmt.Errorf("/proc/%d/stat: CPU times %q: %w", pid, f[11:15], err)
		}
	}
	tick := time.Second / userHZ
	return name, ppid, time.Duration(ticks[0]+ticks[1]) * tick, time.Duration(ticks[2]+ticks[3]) * tick, nil
}

// procAge is how long process pid has run: the machine's uptime (/proc/uptime) less the
// process's start (starttime, field 22 of /proc/<pid>/stat, in USER_HZ since boot).
func procAge(pid int) (time.Duration, error) {
	_, f, err := statFields(pid, 20)
	if err != nil {
		return 0, err
	}
	start, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: start time %q: %w", pid, f[19], err)
	}
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, err
	}
	up, err := strconv.ParseFloat(strings.Fields(string(b) + " ")[0], 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/uptime %q: %w", b, err)
	}
	return time.Duration(up*float64(time.Second)) - time.Duration(start)*(time.Second/userHZ), nil
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
// cores' time the phase had ("fleetd 9.1 s"), and the total against what the machine had: the
// total over the cores is the least wall time that work could take on this machine, however
// little any of it waited (a storm's p99 near it is the machine's, not fleetd's).
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
	return fmt.Sprintf("CPU over %.1f s of wall time (%.0f CPU-s on %d cores): %s; total %.1f s (%.0f%% of the cores' time; %.1f s of wall time at the least on these cores)",
		wall.Seconds(), cores*wall.Seconds(), int(cores), strings.Join(parts, ", "), total.Seconds(), 100*total.Seconds()/(cores*wall.Seconds()),
		total.Seconds()/cores)
}

// TestReadCPU: the CPU reading finds this process and a child by its command name, the child's
// time grows while it works, and once it ended and was waited for its time is the ended
// children's (the load test's phases are read this way).
func TestReadCPU(t *testing.T) {
	name, ppid, _, _, err := procStat(os.Getpid())
	if err != nil || name == "" || ppid != os.Getppid() {
		t.Fatalf("procStat(self) = %q, parent %d, %v; want a name and parent %d", name, ppid, err, os.Getppid())
	}
	before, err := readCPU()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; read line || true")
	in, err := child.StdinPipe() // the child waits on it once it worked
	if err != nil {
		t.Fatal(err)
	}
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
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute the child sh has spent no CPU time in the reading: %v", use)
		}
		time.Sleep(50 * time.Millisecond)
	}
	in.Close() // the child reads EOF and exits
	if err := child.Wait(); err != nil {
		t.Fatalf("the child sh: %v", err)
	}
	after, err := readCPU()
	if err != nil {
		t.Fatal(err)
	}
	if after["sh"] != 0 || after[endedChildren] <= before[endedChildren] {
		t.Errorf("after the child sh ended: sh %v, %s %v (was %v); want its time among the ended children's only",
			after["sh"], endedChildren, after[endedChildren], before[endedChildren])
	}
}

// TestProcAge: a child started after this process has run for less time than it, and its age
// grows with the wall clock (at USER_HZ's grain).
func TestProcAge(t *testing.T) {
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	time.Sleep(300 * time.Millisecond)
	self, err := procAge(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	age, err := procAge(child.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if age < 200*time.Millisecond || age >= self {
		t.Errorf("the child's age %v, this process's %v: want the child's at least the 300 ms it was waited for, less a tick, and less than this process's", age, self)
	}
	if _, err := procAge(-1); err == nil {
		t.Error("procAge(-1) gave no error")
	}
}
