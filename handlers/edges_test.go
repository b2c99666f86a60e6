package handlers_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/fleet"
	"github.com/folly-infra/fleetd/fleet/fleettest"
	"github.com/folly-infra/fleetd/handlers/handlerstest"
)

// TestHTTPEdges: what every client sees at the edges of the contract (docs/http.md
// "Conventions"): a 405 names the methods the path takes in Allow, messages keep "<" and ">"
// as written (no \u003c escapes), and a reconcile with nothing to do carries no empty detail.
func TestHTTPEdges(t *testing.T) {
	f := handlerstest.New(t, handlerstest.Config{Devices: []fleet.Device{fleettest.Declared(12, "node-a")}})
	rows := []struct {
		name, method, path, token string
		body                      string
		status                    int
		allow                     string // the Allow header wanted ("" : none)
		has, hasNot               []string
	}{
		{"refuse/405 names the one method", "DELETE", "/v1/devices", "op", "", 405, "GET",
			[]string{`"method_not_allowed"`, "takes GET, not DELETE"}, nil},
		{"refuse/405 on a webhook route", "GET", "/v1/netbox/webhook/provision", "", "", 405, "POST",
			[]string{"takes POST, not GET"}, nil},
		{"refuse/405 on a templated route", "GET", "/v1/devices/node-a/reconcile", "op", "", 405, "POST", nil, nil},
		{"refuse/401 message keeps its angle brackets", "GET", "/v1/devices", "", "", 401, "",
			[]string{"Bearer <the token in operator.token_file>"}, []string{`\u003c`, `\u003e`}},
		{"ok/reconcile with nothing to do has no detail", "POST", "/v1/devices/node-a/reconcile", "op", "", 200, "",
			[]string{`"outcome": "nothing-to-do"`}, []string{`"detail"`}},
		// Every route's body is capped once, by the route table (docs/http.md's limits).
		{"refuse/413 a webhook over the route's 384 KiB", "POST", "/v1/netbox/webhook/provision", "signature", `{"pad": "` + strings.Repeat("x", 384<<10) + `"}`,
			413, "", []string{`"error":"too_large"`, "larger than 393216 bytes"}, nil},
		{"refuse/an unsigned webhook, unread whatever its size", "POST", "/v1/netbox/webhook/provision", "", `{"pad": "` + strings.Repeat("x", 384<<10) + `"}`,
			401, "", []string{`"error":"bad_signature"`}, nil},
		{"refuse/413 a challenge over the route's 64 KiB", "POST", "/v1/attest/challenge", "", `{"device": "` + strings.Repeat("x", 64<<10) + `"}`,
			413, "", []string{`"error": "too_large"`}, nil},
		{"refuse/413 a challenge over 64 KiB without a Content-Length", "POST", "/v1/attest/challenge", "chunked", `{"device": "` + strings.Repeat("x", 64<<10) + `"}`,
			413, "", []string{`"error": "too_large"`}, nil},
		// A node's body is read strictly, so that no two readers of the same bytes see two
		// different requests: a key given twice, a key in another case, a key fleetd does not
		// know, a string that is not UTF-8 and anything after the object are refused as malformed
		// before anything is decided (the same bodies read leniently would be judged, and node-a,
		// with no request, refused no_request). The message is the code's fixed sentence; the
		// detail is in the log.
		{"refuse/a challenge naming its device twice", "POST", "/v1/attest/challenge", "", `{"device": "node-a", "tpm_version": "1.2", "device": "node-b"}`,
			400, "", []string{`"error": "malformed"`}, nil},
		{"refuse/a key in another case", "POST", "/v1/attest/challenge", "", `{"Device": "node-a", "tpm_version": "1.2"}`,
			400, "", []string{`"error": "malformed"`}, nil},
		{"refuse/an unknown key", "POST", "/v1/attest/challenge", "chunked", `{"device": "node-a", "tpm_version": "1.2", "colour": "red"}`,
			400, "", []string{`"error": "malformed"`}, nil},
		{"refuse/a name that is not UTF-8", "POST", "/v1/attest/challenge", "", "{\"device\": \"node-a\xff\", \"tpm_version\": \"1.2\"}",
			400, "", []string{`"error": "malformed"`}, nil},
		{"refuse/data after the object", "POST", "/v1/attest/challenge", "", `{"device": "node-a", "tpm_version": "1.2"} {}`,
			400, "", []string{`"error": "malformed"`}, nil},
		{"refuse/a body cut short", "POST", "/v1/attest/challenge", "", `{"device": "node-a", "tpm_ver`,
			400, "", []string{`"error": "malformed"`}, nil},
		{"refuse/a well-formed body without a Content-Length is read and judged", "POST", "/v1/attest/challenge", "chunked", `{"device": "node-a", "tpm_version": "1.2"}`,
			409, "", []string{`"error": "no_request"`}, nil},
	}
	for _, r := range rows {
		var in io.Reader = strings.NewReader(r.body)
		if r.token == "chunked" { // no Content-Length: the body arrives chunked
			in, r.token = io.MultiReader(in), ""
		}
		signature := r.token == "signature" // a signature of the right form, not of this body
		if signature {
			r.token = ""
		}
		req, _ := http.NewRequest(r.method, f.URL+r.path, in)
		if signature {
			req.Header.Set("X-Hook-Signature", strings.Repeat("0", 128))
		}
		if r.token != "" {
			req.Header.Set("Authorization", "Bearer "+r.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		if resp.StatusCode != r.status || resp.Header.Get("Allow") != r.allow {
			t.Errorf("%s: %d Allow %q %s; want %d Allow %q", r.name, resp.StatusCode, resp.Header.Get("Allow"), body, r.status, r.allow)
		}
		if !json.Valid(b) {
			t.Errorf("%s: the body is not JSON: %s", r.name, body)
		}
		for _, s := range r.has {
			if !strings.Contains(body, s) {
				t.Errorf("%s: body lacks %q: %s", r.name, s, body)
			}
		}
		for _, s := range r.hasNot {
			if strings.Contains(body, s) {
				t.Errorf("%s: body has %q: %s", r.name, s, body)
			}
		}
	}
}
