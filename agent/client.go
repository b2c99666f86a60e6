package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/api"
)

// maxResponse bounds what the agent reads of a fleetd response (certificate chains are a few KiB).
const maxResponse = 4 << 20

// maxRetryWait caps the doubling wait between retries.
const maxRetryWait = 30 * time.Second

// client posts JSON to fleetd, retrying what may succeed on a later attempt (a connection error,
// a timeout, a 5xx) a bounded number of times, and never a 4xx: a refusal does not change by
// asking again.
type client struct {
	base    string
	http    *http.Client
	retries int
	wait    time.Duration
	log     zerolog.Logger
}

// post sends in to path and decodes a 2xx answer into out. A 4xx is a *RefusedError, anything
// else that survives the retries a *FleetdError.
func (c *client) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode request for %s: %w", path, err)
	}
	wait := c.wait
	for attempt := 0; ; attempt++ {
		status, resp, err := c.once(ctx, path, body)
		switch {
		case err == nil && status >= 200 && status < 300:
			if err := json.Unmarshal(resp, out); err != nil {
				return &FleetdError{Op: "POST " + path, Err: fmt.Errorf("decode fleetd's answer: %w", err)}
			}
			return nil
		case err == nil && status >= 400 && status < 500:
			return refusal(status, resp)
		case err == nil && status < 500:
			return &FleetdError{Op: "POST " + path, Err: fmt.Errorf("unexpected status %d", status)}
		case err == nil:
			err = fmt.Errorf("fleetd answered %d: %s", status, errorMessage(resp))
		}
		if attempt >= c.retries || ctx.Err() != nil {
			return &FleetdError{Op: "POST " + path, Err: fmt.Errorf("after %d attempts: %w", attempt+1, err)}
		}
		c.log.Warn().Err(err).Str("step", path).Int("attempt", attempt+1).Dur("wait", wait).Msg("retrying")
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return &FleetdError{Op: "POST " + path, Err: ctx.Err()}
		case <-t.C:
		}
		wait = min(2*wait, maxRetryWait)
	}
}

// once makes one attempt and returns the status and body.
func (c *client) once(ctx context.Context, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return 0, nil, fmt.Errorf("read fleetd's answer: %w", err)
	}
	return resp.StatusCode, b, nil
}

// refusal reads fleetd's error body; a body that is not one still yields a refusal.
func refusal(status int, body []byte) *RefusedError {
	var e api.Error
	if err := json.Unmarshal(body, &e); err != nil || e.Code == "" {
		return &RefusedError{Status: status, Code: fmt.Sprintf("http_%d", status), Message: errorMessage(body)}
	}
	return &RefusedError{Status: status, Code: e.Code, Message: e.Message}
}

// errorMessage is the message of an error body, or the start of a body that is not one.
func errorMessage(body []byte) string {
	var e api.Error
	if err := json.Unmarshal(body, &e); err == nil && e.Message != "" {
		return e.Code + ": " + e.Message
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}
