package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/api"
)

// maxResponse bounds what the agent reads of a fleetd response (certificate chains are a few KiB).
const maxResponse = 4 << 20

// maxRetryWait caps the doubling wait between retries.
const maxRetryWait = 30 * time.Second

// client posts JSON to fleetd through go-retryablehttp, retrying what may succeed on a later
// attempt (a connection error, a timeout, a 5xx, a 429 after its Retry-After) a bounded number of
// times, and never another 4xx: a refusal does not change by asking again.
type client struct {
	base    string
	http    *http.Client
	retries int
	wait    time.Duration
	log     zerolog.Logger
}

// post sends in to path and decodes a 2xx answer into out. Another 4xx than 429 is a
// *RefusedError; anything else that survives the retries is a *FleetdError.
func (c *client) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode request for %s: %w", path, err)
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, c.base+path, body)
	if err != nil {
		return &FleetdError{Op: "POST " + path, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	attempts := 0
	rc := &retryablehttp.Client{HTTPClient: c.http, RetryMax: max(c.retries, 0), RetryWaitMin: c.wait, RetryWaitMax: maxRetryWait,
		CheckRetry: retryable, ErrorHandler: retryablehttp.PassthroughErrorHandler,
		Backoff: func(lo, hi time.Duration, n int, resp *http.Response) time.Duration {
			return min(retryablehttp.DefaultBackoff(lo, hi, n, resp), maxRetryWait) // Retry-After, capped
		},
		RequestLogHook: func(_ retryablehttp.Logger, _ *http.Request, n int) {
			attempts = n + 1
			if n > 0 {
				c.log.Warn().Str("path", path).Int("attempt", attempts).Msg("retrying") // "step" is the caller's
			}
		}}
	resp, err := rc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return &FleetdError{Op: "POST " + path, Err: ctx.Err()}
		}
		return &FleetdError{Op: "POST " + path, Err: fmt.Errorf("after %d attempts: %w", attempts, err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return &FleetdError{Op: "POST " + path, Err: fmt.Errorf("read fleetd's answer: %w", err)}
	}
	switch status := resp.StatusCode; {
	case status >= 200 && status < 300:
		if err := json.Unmarshal(b, out); err != nil {
			return &FleetdError{Op: "POST " + path, Err: fmt.Errorf("decode fleetd's answer: %w", err)}
		}
		return nil
	case status == http.StatusTooManyRequests || status >= 500:
		return &FleetdError{Op: "POST " + path, Err: fmt.Errorf("after %d attempts: fleetd answered %d: %s", attempts, status, errorMessage(b))}
	case status >= 400:
		return refusal(status, b)
	default:
		return &FleetdError{Op: "POST " + path, Err: fmt.Errorf("unexpected status %d", status)}
	}
}

// retryable retries connection errors, 5xx answers and 429 (fleetd's rate limit), and stops
// when the caller's context is done.
func retryable(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		return true, nil
	}
	return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500, nil
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
