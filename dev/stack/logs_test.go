package stack_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/folly-infra/fleetd/dev/stack"
	"github.com/folly-infra/fleetd/dev/tinkerbell"
)

// TestServerErrorsAreJSON: what net/http answers by itself (a client that speaks plain HTTP to
// fleetd's TLS listener, one that hangs up in the handshake) reaches fleetd's log as a JSON line
// (logger net/http), not as the plain text that stopped `journalctl … | jq` (docs/operate.md).
// The run's whole log is checked at the end of the tests (checkWholeLog).
func TestServerErrorsAreJSON(t *testing.T) {
	s := needStack(t)
	u, err := url.Parse(s.Info().Fleetd.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: fleetd\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Read(make([]byte, 512)) // net/http answers 400 "client sent an HTTP request to an HTTPS server"
	c.Close()
	if c, err = net.DialTimeout("tcp", u.Host, 5*time.Second); err == nil {
		_, _ = c.Write([]byte{0x16, 0x03, 0x01}) // the start of a ClientHello, then nothing
		c.Close()
	}
	eventually(t, "a net/http line in fleetd's log", func() (bool, string) {
		b, err := os.ReadFile(s.Info().Fleetd.Log)
		if err != nil {
			return false, err.Error()
		}
		for _, line := range strings.Split(string(b), "\n") {
			var l struct{ Logger, Level, Message string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Logger == "net/http" && strings.Contains(l.Message, "TLS handshake error") {
				return l.Level == "warn", line
			}
		}
		return false, "none yet"
	})
}

// checkWholeLog reads the log of the whole run (fleetd's, restarts included, and every agent's)
// and reports each line that is not one JSON object or repeats a key.
func checkWholeLog(info stack.Info) error {
	problems, n, err := stack.LogProblems(info)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		if len(problems) > 20 {
			problems = append(problems[:20], fmt.Sprintf("… and %d more", len(problems)-20))
		}
		return fmt.Errorf("%d log lines a JSON reader misreads:\n%s", len(problems), strings.Join(problems, "\n"))
	}
	if n == 0 {
		return fmt.Errorf("the run's logs have no line at all (%s)", info.Fleetd.Log)
	}
	return nil
}

// checkQuamina fails when a flow of the run reached interop/quamina, the replacement of the
// module the proxy does not serve, which Tinkerbell v0.25's controller and server import for
// rules fleetd never uses (reference rules, auto-enrollment): it writes a line into their log on
// every call (tinkerbell.QuaminaCalls; dev/tinkerbell's TestRealWorkerRunsWorkflow shows a
// Hardware with references reaching it, so this check can fail).
func checkQuamina(info stack.Info) error {
	n, err := tinkerbell.QuaminaCalls(info.Tinkerbell.ControllerLog, info.Tinkerbell.ServerLog)
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("the run's flows reached the quamina replacement %d times (lines with %q in %s): a flow of fleetd's depends on pattern matching this Tinkerbell build does not have",
			n, tinkerbell.QuaminaReached, info.Tinkerbell.ControllerLog)
	}
	return nil
}
