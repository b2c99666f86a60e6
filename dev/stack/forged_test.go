package stack_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/dev/stack"
)

// TestForgedRefusalsDuringEnrollment is the attack docs/security.md names ("A hostile host on the lab network"): while the real machine enrolls
// (the real agent with its swtpm), a host on the lab network floods fleetd with challenges for
// the same device and request — the device name and the request id are readable in NetBox —
// from 128 source addresses (each within the node rate limit's burst, so most reach the
// service), with an EK the device does not approve or a TPM 1.2 (refused 400; once the real
// machine attested, 409 no_request). The real enrollment succeeds,
// and NetBox's change log shows no write from the forged ones: no device change by fleetd whose
// fleet_message is a refusal, and no journal entry about one.
func TestForgedRefusalsDuringEnrollment(t *testing.T) {
	needStack(t)
	const name = "forged-flood"
	ask(t, name, "provision")
	d := accepted(t, name)
	before := lastChange(t)

	ctx, stop := context.WithCancel(tctx(t))
	f := newForger(t, name, d.Field("fleet_request"), 128)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() { defer wg.Done(); f.flood(ctx, w) }()
	}
	eventually(t, "the flood reaches fleetd", func() (bool, string) {
		return f.refused.Load() >= 50, fmt.Sprintf("%d refused so far", f.refused.Load())
	})
	during := f.refused.Load()
	err := step(t, stack.Netboot, name, stack.StepOptions{})
	during = f.refused.Load() - during
	stop()
	wg.Wait()
	if err != nil {
		t.Fatalf("the real enrollment failed under %d forged challenges: %v", f.refused.Load(), err)
	}
	t.Logf("forged challenges: %d refused by fleetd (%d while the machine netbooted), %d rate-limited, %d other answers",
		f.refused.Load(), during, f.limited.Load(), f.other.Load())
	if during == 0 || f.other.Load() != 0 {
		t.Fatalf("%d forged challenges refused during the netboot and %d answered otherwise: the flood did not overlap it as meant", during, f.other.Load())
	}
	waitStateIn(t, name, "configuring")

	for _, c := range changesSince(t, before, d.ID) {
		if strings.Contains(c.text, "refused") {
			t.Errorf("NetBox change %d by %s is a refusal: %.300s", c.id, c.user, c.text)
		}
	}
	for _, j := range journal(t, name) {
		if strings.Contains(j.Comments, "refused") {
			t.Errorf("journal entry about a refusal: %q", j.Comments)
		}
	}
}

// forger sends forged challenges for one device and request from many source addresses.
type forger struct {
	t                       testing.TB
	body                    [2][]byte // an unapproved EK; a TPM 1.2
	addrs                   []net.IP
	tls                     *http.Transport
	refused, limited, other atomic.Int64
}

func newForger(t testing.TB, device, request string, sources int) *forger {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ek, _ := x509.MarshalPKIXPublicKey(key.Public())
	f := &forger{t: t}
	f.body[0], _ = json.Marshal(api.ChallengeRequest{Device: device, Request: request, TPMVersion: "2.0", EK: &api.EK{Public: ek}, AK: &api.AKParams{}})
	f.body[1], _ = json.Marshal(api.ChallengeRequest{Device: device, Request: request, TPMVersion: "1.2"})
	for i := range sources {
		f.addrs = append(f.addrs, net.IPv4(127, 66, byte(i/250), byte(1+i%250)))
	}
	cfg, err := stack.FleetdTLS(testStack.Info())
	if err != nil {
		t.Fatal(err)
	}
	f.tls = &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
	return f
}

// flood sends until ctx ends, worker w taking every 16th address in turn.
func (f *forger) flood(ctx context.Context, w int) {
	for i := w; ctx.Err() == nil; i += 16 {
		tr := f.tls.Clone()
		tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: f.addrs[i%len(f.addrs)]}, Timeout: 5 * time.Second}).DialContext
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, testStack.Info().Fleetd.URL+api.PathAttestChallenge, bytes.NewReader(f.body[i%2]))
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			if ctx.Err() == nil {
				f.other.Add(1)
				f.t.Logf("forged challenge: %v", err)
			}
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusBadRequest, http.StatusConflict: // refused; 409 no_request once the real machine attested
			f.refused.Add(1)
		case http.StatusTooManyRequests:
			f.limited.Add(1)
		default:
			f.other.Add(1)
			f.t.Logf("forged challenge answered %s", resp.Status)
		}
	}
}

// change is one entry of NetBox's change log, its data as text.
type change struct {
	id   int64
	user string
	text string
}

// lastChange is the id of NetBox's newest change-log entry.
func lastChange(t testing.TB) int64 {
	t.Helper()
	var page struct {
		Results []struct {
			ID int64 `json:"id"`
		} `json:"results"`
	}
	netboxGet(t, "/api/core/object-changes/?limit=1", &page)
	if len(page.Results) == 0 {
		return 0
	}
	return page.Results[0].ID
}

// changesSince are the change-log entries after id that touched the device or a journal entry
// of it.
func changesSince(t testing.TB, after, deviceID int64) []change {
	t.Helper()
	var out []change
	for _, q := range []string{
		fmt.Sprintf("changed_object_type=dcim.device&changed_object_id=%d", deviceID),
		fmt.Sprintf("changed_object_type=extras.journalentry&related_object_id=%d", deviceID),
	} {
		var page struct {
			Results []struct {
				ID       int64           `json:"id"`
				UserName string          `json:"user_name"`
				Post     json.RawMessage `json:"postchange_data"`
			} `json:"results"`
		}
		netboxGet(t, "/api/core/object-changes/?limit=1000&id__gt="+fmt.Sprint(after)+"&"+q, &page)
		for _, r := range page.Results {
			out = append(out, change{id: r.ID, user: r.UserName, text: string(r.Post)})
		}
	}
	return out
}

func netboxGet(t testing.TB, path string, out any) {
	t.Helper()
	info := testStack.Info()
	u, _ := url.Parse(info.NetBox.URL + path)
	req, _ := http.NewRequestWithContext(tctx(t), http.MethodGet, u.String(), nil)
	req.Header.Set("Authorization", "Token "+info.NetBox.Token)
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}
