// Command rsspages says what of a running Go program's binary is resident in its memory: the
// pages of each ELF section the kernel has mapped into the process (from /proc/PID/pagemap), and
// the resident pages of .text by the module whose functions lie on them. It is how the "Memory"
// section of docs/operate.md names what stands over fleetd's floor: code pages and the tables the
// runtime reads for them (.rodata, .gopclntab), not data fleetd keeps.
//
//	go run ./dev/rsspages [-top N] PID [BINARY]
//
// A release build is stripped (-s -w), so its functions have no names: give as BINARY a build of
// the same commit with the same flags but without -s -w (`go build -trimpath -ldflags '-X
// main.version=…'`), whose loaded sections are laid out the same; rsspages refuses one whose are
// not. Without BINARY it reads the names from the running binary itself.
package main

import (
	"cmp"
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	top := flag.Int("top", 25, "how many modules to list by their resident .text")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: rsspages [-top N] PID [BINARY]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 || flag.NArg() > 2 {
		flag.Usage()
		os.Exit(2)
	}
	pid, err := strconv.Atoi(flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "rsspages: PID %q is not a number\n", flag.Arg(0))
		os.Exit(2)
	}
	r, err := resident(pid, flag.Arg(1))
	if err != nil {
		fmt.Fprintln(os.Stderr, "rsspages:", err)
		os.Exit(1)
	}
	r.print(os.Stdout, *top)
}

// report is what of the binary is resident in the process.
type report struct {
	pageSize int
	pages    int     // resident pages mapped from the binary
	sections []count // by ELF section, in the binary's order
	modules  []count // .text by module ("std" for the standard library and the runtime), most first
}

type count struct {
	name  string
	pages int
}

// resident reads which pages of process pid's binary are present and attributes them; symbols
// names the binary to take function names from ("" for the running one).
func resident(pid int, symbols string) (report, error) {
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	running, err := elf.Open(exe)
	if err != nil {
		return report{}, fmt.Errorf("process %d: %w", pid, err)
	}
	defer running.Close()
	named := running
	if symbols != "" {
		if named, err = elf.Open(symbols); err != nil {
			return report{}, err
		}
		defer named.Close()
		if err := sameLayout(running, named); err != nil {
			return report{}, fmt.Errorf("%s is not laid out as process %d's binary: %w; build it from the same commit with the same flags, without -s -w", symbols, pid, err)
		}
	} else {
		symbols = exe
	}
	syms, err := named.Symbols()
	if errors.Is(err, elf.ErrNoSymbols) {
		return report{}, fmt.Errorf("%s has no symbols (a build with -s): give a build of the same commit and flags without -s -w as BINARY", symbols)
	} else if err != nil {
		return report{}, err
	}
	present, err := presentPages(pid, exe)
	if err != nil {
		return report{}, err
	}
	r := report{pageSize: os.Getpagesize(), pages: len(present)}
	ps := uint64(r.pageSize)
	given := map[uint64]bool{} // a page two sections share is counted in the first
	for _, s := range running.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Size == 0 {
			continue
		}
		n := 0
		for a := s.Addr &^ (ps - 1); a < s.Addr+s.Size; a += ps {
			if present[a] && !given[a] {
				given[a] = true
				n++
			}
		}
		if n > 0 {
			r.sections = append(r.sections, count{s.Name, n})
		}
	}
	r.modules = textByModule(running.Section(".text"), syms, present, ps, modulesOf(symbols))
	return r, nil
}

// sameLayout checks that two builds load the same sections at the same addresses and sizes.
func sameLayout(a, b *elf.File) error {
	loaded := func(f *elf.File) []elf.SectionHeader {
		var out []elf.SectionHeader
		for _, s := range f.Sections {
			if s.Flags&elf.SHF_ALLOC != 0 {
				out = append(out, elf.SectionHeader{Name: s.Name, Addr: s.Addr, Size: s.Size})
			}
		}
		return out
	}
	if !slices.Equal(loaded(a), loaded(b)) {
		return errors.New("its loaded sections' names, addresses or sizes differ")
	}
	return nil
}

// presentPages is the set of the process's resident page addresses that map the file exe names.
func presentPages(pid int, exe string) (map[uint64]bool, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(exe, &st); err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return nil, err
	}
	defer pm.Close()
	ps := uint64(os.Getpagesize())
	present := map[uint64]bool{}
	for line := range strings.Lines(string(maps)) {
		// address perms offset dev inode path
		f := strings.Fields(line)
		if len(f) < 6 || f[4] != strconv.FormatUint(st.Ino, 10) {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("/proc/%d/maps: unreadable line %q", pid, line)
		}
		// One 8-byte entry per page of the mapping, read at once.
		entries := make([]byte, (end-start)/ps*8)
		if _, err := pm.ReadAt(entries, int64(start/ps*8)); err != nil {
			return nil, fmt.Errorf("/proc/%d/pagemap: %w", pid, err)
		}
		for i := 0; i < len(entries); i += 8 {
			if binary.LittleEndian.Uint64(entries[i:])&(1<<63) != 0 { // bit 63: page present
				present[start+uint64(i/8)*ps] = true
			}
		}
	}
	if len(present) == 0 {
		return nil, fmt.Errorf("process %d maps no resident page of %s", pid, exe)
	}
	return present, nil
}

// modulesOf lists the module paths the binary was built from, longest first, so that a
// package is given to the most specific module its path starts with.
func modulesOf(path string) []string {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil
	}
	mods := []string{bi.Main.Path}
	for _, d := range bi.Deps {
		mods = append(mods, d.Path)
	}
	slices.SortFunc(mods, func(a, b string) int { return len(b) - len(a) })
	return mods
}

// textByModule gives each resident .text page to the module of the first function on it.
func textByModule(text *elf.Section, syms []elf.Symbol, present map[uint64]bool, ps uint64, mods []string) []count {
	if text == nil {
		return nil
	}
	slices.SortFunc(syms, func(a, b elf.Symbol) int { return cmp.Compare(a.Value, b.Value) })
	pages := map[string]int{}
	given := map[uint64]bool{}
	for _, s := range syms {
		if s.Value < text.Addr || s.Value >= text.Addr+text.Size || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
			continue
		}
		for a := s.Value &^ (ps - 1); a < s.Value+max(s.Size, 1); a += ps {
			if present[a] && !given[a] {
				given[a] = true
				pages[moduleOf(s.Name, mods)]++
			}
		}
	}
	var out []count
	for m, n := range pages {
		out = append(out, count{m, n})
	}
	slices.SortFunc(out, func(a, b count) int {
		if a.pages != b.pages {
			return b.pages - a.pages
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

// moduleOf is the module of a Go function's symbol name: its package path (before the first
// "." after the last "/", type arguments and the compiler's prefixes set aside), matched against
// the modules; a package of no module is the standard library's.
func moduleOf(name string, mods []string) string {
	name = strings.TrimPrefix(name, "type:.eq.")
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	pkg := name
	slash := strings.LastIndexByte(name, '/')
	if dot := strings.IndexByte(name[slash+1:], '.'); dot >= 0 {
		pkg = name[:slash+1+dot]
	}
	for _, m := range mods {
		if pkg == m || strings.HasPrefix(pkg, m+"/") {
			return m
		}
	}
	return "std"
}

func (r report) print(w io.Writer, top int) {
	mib := func(pages int) float64 { return float64(pages*r.pageSize) / (1 << 20) }
	fmt.Fprintf(w, "%d resident pages of %d KiB mapped from the binary: %.1f MiB\n", r.pages, r.pageSize/1024, mib(r.pages))
	for _, s := range r.sections {
		fmt.Fprintf(w, "  %-20s %7.1f MiB\n", s.name, mib(s.pages))
	}
	fmt.Fprintln(w, ".text by module:")
	for i, m := range r.modules {
		if i == top {
			break
		}
		fmt.Fprintf(w, "  %-60s %7.2f MiB\n", m.name, mib(m.pages))
	}
}
