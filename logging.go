package main

import (
	"io"
	"log"
	"strings"
	"time"

	"github.com/go-logr/zerologr"
	"github.com/rs/zerolog"
	"k8s.io/klog/v2"

	"github.com/folly-infra/fleetd/config"
)

// newLogger is fleetd serve's one logger: JSON lines on w (the journal under systemd), or a
// console rendering for a person when log.format is console (docs/operate.md "Endpoints").
func newLogger(c config.Log, w io.Writer) zerolog.Logger {
	level, _ := zerolog.ParseLevel(c.Level) // validated by config
	if c.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// routeLibraryLogs sends what the libraries fleetd links would write on their own through l, so
// that every line fleetd writes is one JSON object (docs/operate.md, "Endpoints"; a plain-text line stops the
// documented `journalctl … | jq` pipeline): client-go's klog (watch interruptions, the API
// server's warnings), named in "logger" (zerologr's key for logr names, so a library's own
// WithName extends it rather than repeating the key). It is process-wide, as klog is. So is Go's
// standard logger, which net/http's client writes
// to on its own ("RoundTripper returned a response & error; ignoring response", seen in the dev
// stack's log while NetBox was faulted): each of its lines is a warning named "log".
// http.Server's error log is httpErrorLog.
func routeLibraryLogs(l zerolog.Logger) {
	klog.SetLogger(zerologr.New(&l).WithName("klog"))
	log.SetFlags(0)
	log.SetPrefix("")
	log.SetOutput(lineWriter{l.With().Str("logger", "log").Logger()})
}

// httpErrorLog is the ErrorLog of fleetd's HTTP servers: net/http writes a line for what it
// answers itself ("http: TLS handshake error from …", a panic it recovered, an Accept error)
// and each becomes a warning of l with the line as its message.
func httpErrorLog(l zerolog.Logger) *log.Logger {
	return log.New(lineWriter{l.With().Str("logger", "net/http").Logger()}, "", 0)
}

// lineWriter writes each line given to it as one warning.
type lineWriter struct{ log zerolog.Logger }

func (w lineWriter) Write(p []byte) (int, error) {
	for line := range strings.Lines(string(p)) {
		if line = strings.TrimSpace(line); line != "" {
			w.log.Warn().Msg(line)
		}
	}
	return len(p), nil
}
