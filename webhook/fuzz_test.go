package webhook

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/fleet"
)

type nopReconciler struct{}

func (nopReconciler) Reconcile(_ context.Context, id int64) (fleet.Outcome, error) {
	return fleet.Outcome{DeviceID: id, Result: "nothing-to-do"}, nil
}

// FuzzWebhook feeds arbitrary bodies to the intake, signed and unsigned: it never panics, an
// unsigned body is always 401 before anything is parsed, and a signed one is answered 202, 400 or
// 413 — never a 5xx for a caller's bytes.
func FuzzWebhook(f *testing.F) {
	for _, b := range []string{body43, body46, body47, echo, iface, mac, ipOrphan, deleted, `{}`, `null`, `[`, `{"data": {"id": -1}}`,
		`{"object_type": "dcim.macaddress", "data": {"assigned_object_type": "dcim.interface", "assigned_object": {"device": null}}}`} {
		f.Add([]byte(b), true)
		f.Add([]byte(b), false)
	}
	in, err := New(Config{Secret: []byte(secret), ServiceUser: "fleetd"}, Deps{Reconciler: nopReconciler{}, Logger: zerolog.Nop()})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, signed bool) {
		req := httptest.NewRequest("POST", "/v1/netbox/webhook", bytes.NewReader(body))
		if signed {
			req.Header.Set("X-Hook-Signature", sign(body))
		}
		w := httptest.NewRecorder()
		http.MaxBytesHandler(in.Handler("inventory"), 64<<10).ServeHTTP(w, req)
		switch {
		case !signed && w.Code != 401 && !(len(body) > 64<<10 && w.Code == 413):
			t.Fatalf("unsigned body answered %d", w.Code)
		case signed && w.Code != 202 && w.Code != 400 && w.Code != 413:
			t.Fatalf("signed body answered %d: %s", w.Code, w.Body)
		}
	})
}
