package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	stdlog "log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/folly-infra/fleetd/config"
	"github.com/folly-infra/fleetd/dev/logcheck"
)

// syncBuffer is a bytes.Buffer the server's goroutines and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLibraryLogsAreJSON: what net/http and klog (client-go) write on their own reaches fleetd's log as JSON objects with no key twice, each naming its library in
// "logger" (docs/operate.md "Endpoints").
func TestLibraryLogsAreJSON(t *testing.T) {
	var out syncBuffer
	log := newLogger(config.Log{Level: "info", Format: "json"}, &out)
	routeLibraryLogs(log)
	t.Cleanup(func() { klog.ClearLogger(); stdlog.SetOutput(os.Stderr); stdlog.SetFlags(stdlog.LstdFlags) })

	// net/http: a client that speaks plain HTTP to the TLS listener.
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config = newHTTPServer(context.Background(), "", http.NotFoundHandler(), log)
	srv.StartTLS()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Read(make([]byte, 512))
	c.Close()
	// A TLS client that gives up: the handshake error is logged once the server sees it.
	tc, _ := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{ServerName: "nobody.invalid"})
	if tc != nil {
		tc.Close()
	}

	klog.Warning("watch of *v1alpha1.Workflow ended with: very short watch")
	klog.ErrorS(errors.New("connection refused"), "failed to list", "resource", "workflows")
	klog.Flush()
	// Go's standard logger, which net/http's client writes to on its own.
	stdlog.Printf("RoundTripper returned a response & error; ignoring response")

	want := map[string]string{ // logger → a word of its line
		"net/http": "TLS handshake error",
		"klog":     "very short watch",
		"log":      "RoundTripper returned",
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(want) > 0 && time.Now().Before(deadline) {
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var l struct{ Logger, Message, Level string }
			if json.Unmarshal([]byte(line), &l) == nil && strings.Contains(l.Message, want[l.Logger]) && want[l.Logger] != "" {
				delete(want, l.Logger)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(want) > 0 {
		t.Errorf("no JSON line from %v in the log:\n%s", want, out.String())
	}
	problems, n, err := logcheck.Lines(strings.NewReader(out.String()))
	if err != nil || n < 3 {
		t.Fatalf("read %d lines: %v", n, err)
	}
	for _, p := range problems {
		t.Errorf("%s", p)
	}
}
