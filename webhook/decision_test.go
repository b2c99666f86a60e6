package webhook

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/fleet"
)

// TestDecisionLineNamesTheRequest: the worker's decision line for an event names NetBox's
// request and user in every body shape: request_id and username up to 4.5, request.id and
// request.user from 4.6, request alone in 4.7.
func TestDecisionLineNamesTheRequest(t *testing.T) {
	for _, r := range []struct {
		name, body, wantRequest, wantUser string
	}{
		{"ok/NetBox 4.3: request_id, username", body43, "17af32f0-852d-4b3f-8c6e-7c5f9e0a0a11", "admin"},
		{"ok/NetBox 4.6: request.id and request_id", body46, "17af", "admin"},
		{"ok/NetBox 4.7: request.id alone", body47, "17af", "admin"},
	} {
		t.Run(r.name, func(t *testing.T) {
			var logs bytes.Buffer
			in, err := New(Config{Secret: []byte(secret)}, Deps{Reconciler: &recorder{}, Logger: zerolog.New(&logs)})
			if err != nil {
				t.Fatal(err)
			}
			if w := post(t, in.Handler("provision"), r.body); w.Code != 202 {
				t.Fatalf("answer %d %s", w.Code, w.Body)
			}
			in.do(context.Background(), <-in.jobs)
			var decided map[string]any
			for sc := bufio.NewScanner(&logs); sc.Scan(); {
				var line map[string]any
				if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
					t.Fatalf("log line %q: %v", sc.Text(), err)
				}
				if line["message"] == "decision" && line["device_id"] != nil {
					decided = line
				}
			}
			if decided == nil || decided["netbox_request"] != r.wantRequest || decided["netbox_user"] != r.wantUser {
				t.Errorf("decision line %v, want netbox_request %q and netbox_user %q\n%s", decided, r.wantRequest, r.wantUser, logs.String())
			}
		})
	}
}

// deadlines records the deadline of each reconcile's context.
type deadlines struct{ got []time.Duration }

func (d *deadlines) Reconcile(ctx context.Context, id int64) (fleet.Outcome, error) {
	if dl, ok := ctx.Deadline(); ok {
		d.got = append(d.got, time.Until(dl))
	} else {
		d.got = append(d.got, -1)
	}
	return fleet.Outcome{DeviceID: id}, nil
}

// TestWorkTimeout: a queued event is re-read and decided within Config.Timeout, 20 s when none is
// set (as fleetd serve leaves it); the worker's context has that deadline, whatever the request's.
func TestWorkTimeout(t *testing.T) {
	for _, r := range []struct {
		name    string
		timeout time.Duration
		want    time.Duration
	}{
		{"ok/none set: 20 s", 0, 20 * time.Second},
		{"ok/set: its own", 3 * time.Second, 3 * time.Second},
	} {
		d := &deadlines{}
		in, err := New(Config{Secret: []byte(secret), Timeout: r.timeout}, Deps{Reconciler: d, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		post(t, in.Handler("provision"), body46)
		in.do(context.Background(), <-in.jobs)
		// The deadline is set before the reconcile reads it: it is at most the timeout away, and
		// less by no more than the time this step took (well under the 1 s allowed).
		if len(d.got) != 1 || d.got[0] > r.want || d.got[0] < r.want-time.Second {
			t.Errorf("%s: the reconcile's deadline was %v away, want %v", r.name, d.got, r.want)
		}
	}
}
