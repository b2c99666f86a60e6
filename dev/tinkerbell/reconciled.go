package tinkerbell

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// Why a worker must wait for the controller's cache (tink v0.12.2,
// internal/deprecated/workflow/reconciler.go; v0.25's tink/controller/internal/workflow/
// reconciler.go does the same, mergePatchStatus): the controller reads each Workflow from its
// informer cache and writes status with a JSON merge patch computed against that cached copy,
// with no resourceVersion. A reconcile that still reads the Workflow with state "" (its own
// first patch not yet in its cache: the key was queued again while it rendered) renders it
// again and patches status.tasks as a whole, every action PENDING, over whatever tink-server
// recorded in between. tink-server then takes the first PENDING action for the current one
// (Workflow.GetCurrentAction) and refuses the worker's report of its next action ("reported
// action name does not match the current action details"); tink-worker v0.12.2 retries that
// report forever, so the Workflow's later actions never run (v0.25 renders each action a new id,
// so its server no longer finds the action the agent reports). That is read from tink's code and
// fits what the dev stack once saw (a life-talos Workflow left with records [enrolled wipe]);
// the stack's tink-controller log shows reconciles of stale cached copies (a Workflow read
// PREPARING twice), and the workers' logs the reports tink-server refused while its own cache
// lagged.
//
// The controller's cache only moves forward, so once one of its reconciles has read the
// Workflow prepared (PENDING or later), no later reconcile renders it again. The controller
// says so in its debug log, which StartController turns on: each reconcile ends with a
// "Reconcile code flow journal" whose entries name the branch the cached state took (the same
// entries in both versions).

// preparedBranches are the journal entries of a reconcile that read a Workflow prepared.
var preparedBranches = map[string]bool{
	"controller will not trigger another reconcile": true, // PENDING, SUCCESS, FAILED, TIMEOUT
	"process running workflow":                      true,
	"post actions":                                  true,
}

// reconcileJournal is the part of tink-controller's per-reconcile debug line read here.
type reconcileJournal struct {
	Msg      string `json:"msg"`
	Workflow struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"Workflow"`
	Journal []struct {
		Msg string `json:"msg"`
	} `json:"journal"`
}

// readPrepared says whether one log line is a reconcile of wf that read it prepared.
func readPrepared(line []byte, wf *Workflow) bool {
	if !bytes.Contains(line, []byte(`"Reconcile code flow journal"`)) || !bytes.Contains(line, []byte(strconv.Quote(wf.Name))) {
		return false
	}
	var j reconcileJournal
	if json.Unmarshal(line, &j) != nil || j.Workflow.Name != wf.Name || j.Workflow.Namespace != wf.Namespace {
		return false
	}
	for _, e := range j.Journal {
		if preparedBranches[e.Msg] {
			return true
		}
	}
	return false
}

// lineTime is a log line's time: v0.25's slog JSON "time" (RFC 3339, the line's first key) or
// v0.12.2's zap JSON "ts" (seconds since the epoch), or false. (The journal's own entries carry
// a "time" too, so only the first key is v0.25's.)
func lineTime(line []byte) (time.Time, bool) {
	if rest, ok := bytes.CutPrefix(line, []byte(`{"time":"`)); ok {
		end := bytes.IndexByte(rest, '"')
		if end < 0 {
			return time.Time{}, false
		}
		t, err := time.Parse(time.RFC3339Nano, string(rest[:end]))
		return t, err == nil
	}
	i := bytes.Index(line, []byte(`"ts":`))
	if i < 0 {
		return time.Time{}, false
	}
	rest := line[i+len(`"ts":`):]
	end := bytes.IndexAny(rest, ",}")
	if end < 0 {
		return time.Time{}, false
	}
	f, err := strconv.ParseFloat(string(rest[:end]), 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, int64(f*1e9)), true
}

// nudgeAfter is how long WaitReconciled waits for the prepared reconcile before it nudges
// tink-controller into one, and between nudges: a nudge is one small patch, and the reconcile it
// brings takes the controller milliseconds.
const nudgeAfter = 500 * time.Millisecond

// WaitReconciled waits until the controller's log (controllerLog, the file it appends to) shows
// a reconcile that read wf prepared, and so until no reconcile can render wf
// again over a worker's reports (see above). Call it once WaitPrepared has returned. The log is
// read backwards from its end down to wf's creation, then forwards as it grows, so a large
// fleet's log is not read whole for every machine.
//
// The controller reconciles a Workflow again after its own status patch, but not always: of
// 1,000 Workflows prepared in make load's storms, 659 were never reconciled once prepared, and
// their machines' netboots waited for a line that never came. So when none has come for
// nudgeAfter, nudge (when set) changes the Workflow so that the controller reconciles it again
// (nudgeWorkflow: an annotation), and again after each nudgeAfter.
func WaitReconciled(ctx context.Context, controllerLog string, wf *Workflow, nudge func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, prepareTimeout)
	defer cancel()
	f, err := os.Open(controllerLog)
	if err != nil {
		return fmt.Errorf("read the controller's log: %w", err)
	}
	defer f.Close()
	// The creation time has whole seconds; a line of that second counts.
	since := wf.CreationTimestamp.Add(-time.Second)
	found, end, err := scanBack(f, since, wf)
	nudged := time.Now()
	for err == nil && !found {
		if nudge != nil && time.Since(nudged) >= nudgeAfter {
			if err := nudge(ctx); err != nil && ctx.Err() == nil {
				return fmt.Errorf("nudge the controller to reconcile Workflow %s: %w", wf.Name, err)
			}
			nudged = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the controller logged no reconcile that read Workflow %s prepared within %s (state %s): its cache may still hold it unprepared; see %s",
				wf.Name, prepareTimeout, wf.Status.State, controllerLog)
		case <-time.After(20 * time.Millisecond):
		}
		found, end, err = scanForward(f, end, wf)
	}
	if err != nil {
		return fmt.Errorf("read the controller's log %s: %w", controllerLog, err)
	}
	return nil
}

// scanBack reads f's complete lines from its end back to the first line older than since,
// and returns whether one is a prepared reconcile of wf, and the offset just past the last
// complete line.
func scanBack(f *os.File, since time.Time, wf *Workflow) (bool, int64, error) {
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return false, 0, err
	}
	const chunk = 256 << 10
	var tail []byte // the start of a line whose end was read already
	end, pos := int64(-1), size
	for pos > 0 {
		n := min(int64(chunk), pos)
		pos -= n
		buf := make([]byte, n, n+int64(len(tail)))
		if _, err := f.ReadAt(buf, pos); err != nil {
			return false, 0, err
		}
		buf = append(buf, tail...)
		if end < 0 { // the last complete line ends at the last newline
			i := bytes.LastIndexByte(buf, '\n')
			if i < 0 {
				tail = buf
				continue
			}
			end = pos + int64(i) + 1
			buf = buf[:i+1]
		}
		first := 0
		if pos > 0 { // the chunk's first line may have begun in the chunk before
			first = bytes.IndexByte(buf, '\n') + 1
		}
		tail = append([]byte(nil), buf[:first]...)
		lines := bytes.Split(bytes.TrimSuffix(buf[first:], []byte("\n")), []byte("\n"))
		for i := len(lines) - 1; i >= 0; i-- {
			if t, ok := lineTime(lines[i]); ok && t.Before(since) {
				return false, end, nil
			}
			if readPrepared(lines[i], wf) {
				return true, end, nil
			}
		}
	}
	if end < 0 {
		end = 0
	}
	return false, end, nil
}

// scanForward reads f's complete lines from offset from on, as scanBack does.
func scanForward(f *os.File, from int64, wf *Workflow) (bool, int64, error) {
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil || size <= from {
		return false, from, err
	}
	buf := make([]byte, size-from)
	if _, err := f.ReadAt(buf, from); err != nil {
		return false, from, err
	}
	i := bytes.LastIndexByte(buf, '\n')
	if i < 0 {
		return false, from, nil
	}
	for _, line := range bytes.Split(buf[:i], []byte("\n")) {
		if readPrepared(line, wf) {
			return true, from + int64(i) + 1, nil
		}
	}
	return false, from + int64(i) + 1, nil
}
