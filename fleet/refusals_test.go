package fleet_test

import (
	"context"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
)

// TestRefusalsBeforeActivationWriteNothing: challenges refused before credential activation —
// a TPM 1.2, a stale Workflow's request — write nothing to NetBox however many come, and when the
// request's Workflow fails its message names the last refusal's code in its fixed sentence
// (docs/enrollment.md, "Refusals"). A refusal kept for an older request is not quoted for a newer one.
func TestRefusalsBeforeActivationWriteNothing(t *testing.T) {
	d := fleettest.Declared(12, "node-a")
	d.Status = fleet.StatusStaged
	d.Owned = fleet.Owned{State: fleet.StatePending, Request: "provision-aaaaaaaa", Workflow: fleet.WorkflowName("node-a", "provision-aaaaaaaa")}
	inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
	s := newTestService(inv, inst)
	ctx := context.Background()
	before := inv.Get(12).Version
	for i := range 200 {
		in := fleet.ChallengeInput{ClaimedDevice: "node-a", ClaimedRequest: d.Owned.Request, ClaimedTPMVersion: "1.2"}
		if i%2 == 1 {
			in.ClaimedRequest = "wipe-bbbbbbbb" // refused as request_mismatch: not a refusal of this request's machine
		}
		if _, out, err := s.Enrollment.EnrollChallenge(ctx, in); err == nil || out.Result != "refused" {
			t.Fatalf("challenge %d: %+v %v, want a refusal", i, out, err)
		}
	}
	if got := inv.Get(12); got.Version != before || got.Owned.Message != "" || len(inv.JournalOf(12)) != 0 {
		t.Fatalf("after 200 refused challenges NetBox changed: version %s → %s, message %q, journal %q",
			before, got.Version, got.Owned.Message, inv.JournalOf(12))
	}
	inst.Set(d.Owned.Workflow, fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, FailedAction: "fleetd-enroll"})
	if _, err := s.Requests.Reconcile(ctx, 12); err != nil {
		t.Fatal(err)
	}
	got := inv.Get(12)
	want := "Attestation of node-a refused (tpm_unsupported): " + fleet.PublicSentence("tpm_unsupported")
	if got.Owned.State != fleet.StateFailed || !strings.Contains(got.Owned.Message, want) || len(got.Owned.Message) > fleet.MaxMessage {
		t.Errorf("failed request: state %q message %q, want failed with %q within %d bytes", got.Owned.State, got.Owned.Message, want, fleet.MaxMessage)
	}
	if j := inv.JournalOf(12); len(j) != 1 || !strings.Contains(j[0], want) {
		t.Errorf("journal %q, want the failure with the refusal's sentence", j)
	}

	// A refusal noted for request a is not quoted when request b's Workflow fails.
	d2 := fleettest.Declared(13, "node-b")
	d2.Owned = fleet.Owned{State: fleet.StatePending, Request: "provision-aaaaaaaa", Workflow: fleet.WorkflowName("node-b", "provision-aaaaaaaa")}
	inv.Set(d2)
	if _, _, err := s.Enrollment.EnrollChallenge(ctx, fleet.ChallengeInput{ClaimedDevice: "node-b", ClaimedRequest: d2.Owned.Request, ClaimedTPMVersion: "1.2"}); err == nil {
		t.Fatal("a TPM 1.2 was not refused")
	}
	d2.Owned.Request, d2.Owned.Workflow = "provision-cccccccc", fleet.WorkflowName("node-b", "provision-cccccccc")
	inv.Set(d2)
	inst.Set(d2.Owned.Workflow, fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, FailedAction: "fleetd-enroll"})
	if _, err := s.Requests.Reconcile(ctx, 13); err != nil {
		t.Fatal(err)
	}
	if got := inv.Get(13); got.Owned.State != fleet.StateFailed || strings.Contains(got.Owned.Message, "refused (") {
		t.Errorf("request c failed with %q (state %q): an older request's refusal is quoted", got.Owned.Message, got.Owned.State)
	}
}

// TestLifecycleWriteConflicts: a lifecycle event's write that meets another writer's change
// (NetBox answers 412) is re-read and applied again while the device is on the same request, and
// dropped once the request moved on (every enrollment write is conditional: docs/design.md §9, "Several instances").
func TestLifecycleWriteConflicts(t *testing.T) {
	for _, r := range []struct {
		name      string
		other     func(*fleet.Device)
		wantState fleet.State
		wantJourn int
	}{
		{"ok/the owner edited another field: re-read, applied", func(d *fleet.Device) { d.Serial = "CHASSIS-2" }, fleet.StateFailed, 1},
		{"ok/the request moved on: nothing applied", func(d *fleet.Device) {
			d.Owned.Request, d.Owned.Workflow, d.Owned.State = "wipe-bbbbbbbb", fleet.WorkflowName("node-a", "wipe-bbbbbbbb"), fleet.StatePending
		}, fleet.StatePending, 0},
	} {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Owned = fleet.Owned{State: fleet.StatePending, Request: "provision-aaaaaaaa", Workflow: fleet.WorkflowName("node-a", "provision-aaaaaaaa")}
			inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
			s := newTestService(inv, inst)
			inst.Set(d.Owned.Workflow, fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, FailedAction: "fleetd-enroll"})
			inv.ConflictOnce[12] = r.other
			if _, err := s.Requests.Reconcile(context.Background(), 12); err != nil {
				t.Fatal(err)
			}
			got := inv.Get(12)
			if got.Owned.State != r.wantState || len(inv.JournalOf(12)) != r.wantJourn {
				t.Errorf("state %q journal %q, want %q and %d entries", got.Owned.State, inv.JournalOf(12), r.wantState, r.wantJourn)
			}
		})
	}
}

// TestRecordedRefusalReadAsItsCode: when a pending request's Workflow fails, the refusal that
// fleet_message records is read back as its code alone: the message fleetd wrote, a
// rewording of it, and an edit that keeps the code all end the request with the same message, the
// code's fixed sentence; text around the code is never quoted, and a message that names no known
// code quotes nothing.
func TestRecordedRefusalReadAsItsCode(t *testing.T) {
	const code = "boot_policy"
	quoted := "Attestation of node-a refused (" + code + "): " + fleet.PublicSentence(code)
	var first string
	for _, r := range []struct {
		name, message string
		wantQuote     bool
	}{
		{"ok/the sentence fleetd writes", quoted, true},
		{"ok/reworded: the code is what is read", "node-a: attestation was refused (" + code + "), see fleetd's log.", true},
		{"ok/edited around the code: the edit is not quoted", "Attestation of node-a refused (" + code + "): CALL 555-0100 NOW", true},
		{"refuse/an edit naming no code: nothing quoted", "Attestation of node-a refused: CALL 555-0100 NOW", false},
		{"refuse/an unknown word in parentheses: nothing quoted", "Attestation of node-a refused (call_555_0100)", false},
		{"refuse/the claim's message: nothing quoted", "provision accepted as request provision-aaaaaaaa: Workflow node-a-provision-aaaaaaaa from Template t.", false},
	} {
		t.Run(r.name, func(t *testing.T) {
			d := fleettest.Declared(12, "node-a")
			d.Owned = fleet.Owned{State: fleet.StatePending, Request: "provision-aaaaaaaa", Workflow: fleet.WorkflowName("node-a", "provision-aaaaaaaa"), Message: r.message}
			inv, inst := fleettest.NewNetBox(d), fleettest.NewInstaller()
			s := newTestService(inv, inst)
			inst.Set(d.Owned.Workflow, fleet.WorkflowStatus{Phase: fleet.WorkflowFailed, FailedAction: "fleetd-enroll"})
			if _, err := s.Requests.Reconcile(context.Background(), 12); err != nil {
				t.Fatal(err)
			}
			got := inv.Get(12).Owned
			if got.State != fleet.StateFailed {
				t.Fatalf("state %q, want failed", got.State)
			}
			if strings.Contains(got.Message, "555-0100") || strings.Contains(got.Message, "call_555") {
				t.Errorf("message %q quotes text NetBox held", got.Message)
			}
			if strings.Contains(got.Message, quoted) != r.wantQuote || strings.Contains(got.Message, "refused (") != r.wantQuote {
				t.Errorf("message %q, want the refusal %q quoted: %v", got.Message, quoted, r.wantQuote)
			}
			if r.wantQuote {
				if first == "" {
					first = got.Message
				} else if got.Message != first {
					t.Errorf("message %q, want %q: the recorded refusal's wording changed the outcome", got.Message, first)
				}
			}
		})
	}
}
