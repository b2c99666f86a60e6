package tinkerbell_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/folly-infra/fleetd/dev/tinkerbell"
)

// journalLine is one reconcile's debug line as tink-controller v0.12.2 logs it (zapr over zap's
// production JSON encoder; controller-runtime adds the Workflow's key), its journal the given
// branch entries after "starting reconcile".
func journalLine(at time.Time, ns, name string, branch ...string) string {
	entries := []string{`{"msg":"starting reconcile","source":{"function":"Reconcile()","file":"reconciler.go","line":67},"time":"x"}`}
	for _, b := range branch {
		entries = append(entries, fmt.Sprintf(`{"msg":%q,"source":{"function":"Reconcile()","file":"reconciler.go","line":80},"time":"x"}`, b))
	}
	return fmt.Sprintf(`{"level":"debug","ts":%.9f,"logger":"github.com/tinkerbell/tink","caller":"workflow/reconciler.go:62","msg":"Reconcile code flow journal","controller":"workflow","controllerGroup":"tinkerbell.org","controllerKind":"Workflow","Workflow":{"name":%q,"namespace":%q},"namespace":%q,"name":%q,"reconcileID":"r","journal":[%s]}`,
		float64(at.UnixNano())/1e9, name, ns, ns, name, strings.Join(entries, ","))
}

// slogJournalLine is the same line as Tinkerbell v0.25's `tinkerbell` logs it (logr over slog's
// JSON handler: "time" first, in RFC 3339).
func slogJournalLine(at time.Time, ns, name string, branch ...string) string {
	entries := []string{`{"msg":"starting reconcile","source":{"function":"Reconcile()","file":"reconciler.go","line":121},"time":"2026-12-05T17:00:00Z"}`}
	for _, b := range branch {
		entries = append(entries, fmt.Sprintf(`{"msg":%q,"source":{"function":"Reconcile()","file":"reconciler.go","line":136},"time":"2026-12-05T17:00:00Z"}`, b))
	}
	return fmt.Sprintf(`{"time":%q,"level":"-1","caller":"tink/controller/internal/workflow/reconciler.go:118","msg":"Reconcile code flow journal","logger":"tink-controller","controller":"workflow","controllerGroup":"tinkerbell.org","controllerKind":"Workflow","Workflow":{"name":%q,"namespace":%q},"namespace":%q,"name":%q,"reconcileID":"r","journal":[%s]}`,
		at.UTC().Format(time.RFC3339Nano), name, ns, ns, name, strings.Join(entries, ","))
}

func reconcileLine(at time.Time, name string) string {
	return fmt.Sprintf(`{"level":"info","ts":%.9f,"logger":"github.com/tinkerbell/tink","msg":"Reconcile","Workflow":{"name":%q,"namespace":"ns"}}`, float64(at.UnixNano())/1e9, name)
}

// TestWaitReconciled: a worker may start only once tink-controller logged a reconcile that read
// its Workflow prepared; a render, another Workflow's reconcile, or one of an older Workflow of
// the same name is not that.
func TestWaitReconciled(t *testing.T) {
	created := time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)
	wf := &tinkerbell.Workflow{ObjectMeta: metav1.ObjectMeta{Name: "wipe-1", Namespace: "ns", CreationTimestamp: metav1.NewTime(created)}}
	at := func(d time.Duration) time.Time { return created.Add(d) }
	// filler is other Workflows' reconciles, more than one read-back chunk of them.
	var filler []string
	for i := 0; len(strings.Join(filler, "\n")) < 600<<10; i++ {
		filler = append(filler, journalLine(at(2*time.Second), "ns", fmt.Sprintf("other-%d", i), "controller will not trigger another reconcile"))
	}
	tests := []struct {
		name   string
		lines  []string
		later  string // appended while WaitReconciled waits
		nudged string // appended when WaitReconciled nudges the controller
		wantOK bool
	}{
		{name: "ok/logged once the controller is nudged", wantOK: true,
			lines:  []string{journalLine(at(0), "ns", "wipe-1", "new workflow", "patching status")},
			nudged: journalLine(at(3*time.Second), "ns", "wipe-1", "controller will not trigger another reconcile")},
		{name: "ok/pending read after the render", wantOK: true, lines: []string{
			reconcileLine(at(0), "wipe-1"), journalLine(at(0), "ns", "wipe-1", "new workflow", "patching status"),
			journalLine(at(time.Second), "ns", "wipe-1", "controller will not trigger another reconcile")}},
		{name: "ok/running read, before more than a chunk of other lines", wantOK: true, lines: append([]string{
			journalLine(at(0), "ns", "wipe-1", "new workflow", "patching status"),
			journalLine(at(time.Second), "ns", "wipe-1", "process running workflow")}, filler...)},
		{name: "ok/logged while it waits", wantOK: true,
			lines: []string{journalLine(at(0), "ns", "wipe-1", "new workflow", "patching status")},
			later: journalLine(at(time.Second), "ns", "wipe-1", "controller will not trigger another reconcile")},
		{name: "ok/v0.25's log: pending read after the render", wantOK: true, lines: []string{
			slogJournalLine(at(0), "ns", "wipe-1", "new workflow", "patching status"),
			slogJournalLine(at(time.Second), "ns", "wipe-1", "controller will not trigger another reconcile")}},
		{name: "refuse/v0.25's log: an older Workflow of the same name", lines: append([]string{
			slogJournalLine(at(-time.Hour), "ns", "wipe-1", "controller will not trigger another reconcile"),
			slogJournalLine(at(0), "ns", "wipe-1", "new workflow", "patching status")}, filler...)},
		{name: "refuse/only renders", lines: []string{
			journalLine(at(0), "ns", "wipe-1", "new workflow", "patching status"),
			journalLine(at(time.Second), "ns", "wipe-1", "new workflow", "patching status")}},
		{name: "refuse/another Workflow whose name begins the same", lines: []string{
			journalLine(at(time.Second), "ns", "wipe-10", "controller will not trigger another reconcile")}},
		{name: "refuse/the same name in another namespace", lines: []string{
			journalLine(at(time.Second), "other", "wipe-1", "controller will not trigger another reconcile")}},
		{name: "refuse/an older Workflow of the same name", lines: append([]string{
			journalLine(at(-time.Hour), "ns", "wipe-1", "controller will not trigger another reconcile"),
			journalLine(at(0), "ns", "wipe-1", "new workflow", "patching status")}, filler...)},
		{name: "refuse/a line not yet complete", lines: []string{
			journalLine(at(0), "ns", "wipe-1", "new workflow", "patching status"),
			strings.TrimSuffix(journalLine(at(time.Second), "ns", "wipe-1", "controller will not trigger another reconcile"), "}")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "tink-controller.log")
			body := strings.Join(tc.lines, "\n")
			if !strings.HasPrefix(tc.name, "refuse/a line not yet") {
				body += "\n"
			}
			if err := os.WriteFile(log, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.later != "" {
				go func() {
					time.Sleep(100 * time.Millisecond)
					f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
					if err == nil {
						fmt.Fprintln(f, tc.later)
						f.Close()
					}
				}()
			}
			nudges := 0
			nudge := func(context.Context) error {
				nudges++
				if tc.nudged != "" {
					f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
					if err != nil {
						return err
					}
					defer f.Close()
					_, err = fmt.Fprintln(f, tc.nudged)
					return err
				}
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			err := tinkerbell.WaitReconciled(ctx, log, wf, nudge)
			switch {
			case tc.nudged != "" && nudges != 1:
				t.Errorf("nudged the controller %d times, want once: the line it logged then ends the wait", nudges)
			case !tc.wantOK && nudges < 1:
				t.Errorf("waited 1.5 s for a line that never came without nudging the controller")
			}
			switch {
			case tc.wantOK && err != nil:
				t.Fatalf("WaitReconciled: %v", err)
			case !tc.wantOK && (err == nil || !strings.Contains(err.Error(), "logged no reconcile that read Workflow wipe-1 prepared")):
				t.Fatalf("WaitReconciled = %v, want it to say no reconcile read the Workflow prepared", err)
			}
		})
	}
}
