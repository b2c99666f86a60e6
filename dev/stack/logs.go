package stack

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/folly-infra/fleetd/dev/logcheck"
)

// LogProblems reads the whole of fleetd's logs (every process the stack ran, each instance's and
// restarts included)
// and the agent's log of every machine, and returns each line that is not one JSON object or
// repeats a key (docs/operate.md "Endpoints": the log is read with jq), naming the file, and the
// number of lines read. The tests of the stack end with it, so the log of a whole run is checked.
func LogProblems(info Info) ([]string, int, error) {
	var files []string
	for _, in := range info.Fleetd.instances() {
		files = append(files, in.Log)
	}
	for _, name := range slices.Sorted(maps.Keys(info.Machines)) {
		files = append(files, filepath.Join(info.Machines[name].Dir, MachineAgentLog))
	}
	var out []string
	total := 0
	for _, path := range files {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) && !slices.ContainsFunc(info.Fleetd.instances(), func(in FleetdInstance) bool { return in.Log == path }) {
			continue // the machine never ran the agent
		}
		if err != nil {
			return nil, total, fmt.Errorf("read log: %w", err)
		}
		problems, n, err := logcheck.Lines(f)
		f.Close()
		if err != nil {
			return nil, total, fmt.Errorf("read %s: %w", path, err)
		}
		total += n
		for _, p := range problems {
			out = append(out, path+": "+p.String())
		}
	}
	return out, total, nil
}

// appendFile appends b to the file at path, creating it (mode 0600).
func appendFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
