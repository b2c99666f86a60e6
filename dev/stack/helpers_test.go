package stack_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
)

// deadline is how long a test waits for something fleetd does in the background. It is
// generous on purpose: the machine running the tests may be loaded; nothing here measures speed.
const deadline = 90 * time.Second

// eventually polls cond until it reports true, failing the test with cond's last word after
// deadline.
func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not so after %s; last: %s", what, deadline, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*deadline)
	t.Cleanup(cancel)
	return c
}

// device reads a device by name through NetBox's REST API, as the owner.
func device(t testing.TB, name string) stack.OwnerDevice {
	t.Helper()
	d, err := testStack.Owner().Device(tctx(t), name)
	if err != nil {
		t.Fatalf("read device %s: %v", name, err)
	}
	return d
}

// patch changes a device as the owner does with curl.
func patch(t testing.TB, name string, body map[string]any) {
	t.Helper()
	if _, err := testStack.Owner().Patch(tctx(t), testStack.DeviceID(name), body); err != nil {
		t.Fatalf("PATCH device %s %v: %v", name, body, err)
	}
}

// ask sets desired_action as the owner.
func ask(t testing.TB, name, action string) {
	t.Helper()
	patch(t, name, map[string]any{"custom_fields": map[string]any{"desired_action": action}})
}

func journal(t testing.TB, name string) []stack.JournalEntry {
	t.Helper()
	j, err := testStack.Owner().Journal(tctx(t), testStack.DeviceID(name))
	if err != nil {
		t.Fatalf("read journal of %s: %v", name, err)
	}
	return j
}

// waitJournal waits until the device has n journal entries and returns them. fleetd writes the
// entry just after the state it records, so a test that saw the state waits for the entry.
func waitJournal(t testing.TB, name string, n int) []stack.JournalEntry {
	t.Helper()
	var j []stack.JournalEntry
	eventually(t, fmt.Sprintf("%d journal entries on %s", n, name), func() (bool, string) {
		j = journal(t, name)
		return len(j) >= n, fmt.Sprintf("%d entries: %+v", len(j), j)
	})
	return j
}

func deviceWorkflows(t testing.TB, name string) []tinkerbell.Workflow {
	t.Helper()
	wfs, err := stack.DeviceWorkflows(tctx(t), testStack.Kube(), testStack.Info().Namespace, testStack.DeviceID(name))
	if err != nil {
		t.Fatalf("list Workflows of %s: %v", name, err)
	}
	return wfs
}

// waitState waits until the device's fleet_state is want and returns the device.
func waitState(t testing.TB, name, want string) stack.OwnerDevice {
	t.Helper()
	var d stack.OwnerDevice
	eventually(t, name+" fleet_state "+want, func() (bool, string) {
		var err error
		d, err = testStack.Owner().Device(tctx(t), name)
		if err != nil {
			return false, err.Error()
		}
		return d.Field("fleet_state") == want, "fleet_state=" + d.Field("fleet_state") + " message=" + d.Field("fleet_message")
	})
	return d
}

// postWebhook posts a body to one of fleetd's webhook routes with the given signature header
// ("" sends none) and returns the status and the answer.
func postWebhook(t testing.TB, path string, body []byte, signature string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(tctx(t), http.MethodPost, testStack.Info().Fleetd.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if signature != "" {
		req.Header.Set("X-Hook-Signature", signature)
	}
	return do(t, req)
}

// do sends a request to fleetd (its https URL, trusting the stack's CA, or its plain one).
func do(t testing.TB, req *http.Request) (int, string) {
	t.Helper()
	c, err := stack.FleetdClient(testStack.Info(), deadline)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric sums the samples of one of fleetd's metrics whose labels include every pair of labels
// ("k", "v", ...); 0 when there is none.
func metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	v, err := scrape(testStack.Info().Fleetd.HTTPURL, name, labels...)
	if err != nil {
		t.Fatalf("read metric %s: %v", name, err)
	}
	return v
}

// scrape sums the samples of one metric on fleetd's /metrics (see metric), at a plain http URL.
func scrape(baseURL, name string, labels ...string) (float64, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(baseURL + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && strings.Contains(line, labels[i]+`="`+labels[i+1]+`"`)
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); match && err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// reconcileRuns is the number of periodic reconciles fleetd finished (any result).
func reconcileRuns(t testing.TB) float64 { return metric(t, "fleetd_reconcile_runs_total") }

// waitReconciles waits until fleetd finished n more periodic reconciles than before.
func waitReconciles(t testing.TB, before float64, n int) {
	t.Helper()
	eventually(t, "periodic reconcile", func() (bool, string) {
		got := reconcileRuns(t)
		return got >= before+float64(n), "runs " + strconv.FormatFloat(got, 'f', 0, 64)
	})
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// deviceView is a device as the owner reads it from NetBox.
type deviceView = stack.OwnerDevice

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// waitStateIn waits until the device's fleet_state is one of want and returns the device.
func waitStateIn(t testing.TB, name string, want ...string) deviceView {
	t.Helper()
	var d deviceView
	eventually(t, name+" fleet_state in "+strings.Join(want, ", "), func() (bool, string) {
		var err error
		d, err = testStack.Owner().Device(tctx(t), name)
		if err != nil {
			return false, err.Error()
		}
		for _, w := range want {
			if d.Field("fleet_state") == w {
				return true, ""
			}
		}
		return false, "fleet_state=" + d.Field("fleet_state") + " message=" + d.Field("fleet_message")
	})
	return d
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// testWriter writes a step's progress lines into the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// runFleetd runs the stack's fleetd binary with args, as an operator on spore runs it, and
// returns its exit status, stdout and stderr.
func runFleetd(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(tctx(t), testStack.Info().Fleetd.Binary, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errOut.String()
	case err != nil:
		t.Fatalf("run fleetd %v: %v", args, err)
	}
	return 0, out.String(), errOut.String()
}
