// Package netbox is fleetd's NetBox adapter: it implements fleet.NetBox over the REST API
// (docs/design.md §2), and loads netbox-webhooks.yaml (schema.go). What it writes is go-netbox's
// request models; what it reads is decoded into the few fields fleetd uses (convert.go).
//
// Trust: NetBox is the owner's source of truth; what it answers is the owner's declaration and
// is passed to fleet unvalidated (fleet validates declarations). The token is a secret and is
// never logged.
package netbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Config configures a Client.
type Config struct {
	// URL is NetBox's base URL, e.g. https://netbox.example (without /api).
	URL string
	// Token is an API token: a v1 plaintext or a v2 "nbt_<key>.<token>"; it is sent as
	// "Authorization: Token <Token>", which NetBox ≥ 4.5 accepts for both (its
	// netbox/netbox/api/authentication.py picks v2 by the nbt_ prefix, not by the keyword).
	Token string
	// HTTPClient supplies the transport and the per-attempt timeout (default: a client with
	// Timeout whose transport keeps idlePerHost connections to NetBox open).
	HTTPClient *http.Client
	// Retries is how many times a request is retried after a 5xx answer or a connection error
	// (never after a 4xx). Default 3; negative means none.
	Retries int
	// RetryWaitMin and RetryWaitMax bound the exponential backoff (defaults 200 ms and 3 s).
	RetryWaitMin, RetryWaitMax time.Duration
	// Timeout bounds one attempt when HTTPClient has none (default 15 s).
	Timeout  time.Duration
	Logger   zerolog.Logger
	Registry prometheus.Registerer // metrics are registered here; nil registers nothing
}

// Client talks to NetBox. It implements fleet.NetBox.
type Client struct {
	http    *http.Client // retrying
	base    string
	token   string
	log     zerolog.Logger
	metrics *metrics
	noETag  sync.Once // the warning that NetBox sends no ETag, once per process
	// the warning that NetBox's status names a version before 4.6, once per process
	oldNetBox sync.Once
}

// idlePerHost is how many idle connections to NetBox the default client keeps open: as many as
// fleetd has requests in flight at its busiest (16 webhook workers, each reading a device's
// interfaces beside it, with the reconcile and the boot checks besides). Go's default
// transport keeps 2, so in a storm nearly every request opened a new TCP connection (and, to an
// HTTPS NetBox, a TLS handshake) and closed it after (docs/performance.md). Idle connections
// close after 90 s, so none are held at rest.
const idlePerHost = 64

// pooledTransport is Go's default transport (proxy from the environment, dial and TLS timeouts,
// HTTP/2 where NetBox offers it) keeping idlePerHost idle connections.
func pooledTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = idlePerHost
	t.MaxIdleConns = max(t.MaxIdleConns, idlePerHost)
	return t
}

// New makes a Client. It does not contact NetBox; use Ping for readiness.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" || cfg.Token == "" {
		return nil, errors.New("make the NetBox client: URL and token are required")
	}
	if cfg.Retries == 0 {
		cfg.Retries = 3
	}
	if cfg.RetryWaitMin <= 0 {
		cfg.RetryWaitMin = 200 * time.Millisecond
	}
	if cfg.RetryWaitMax <= 0 {
		cfg.RetryWaitMax = 3 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 15 * time.Second
	}
	base := &http.Client{Timeout: cfg.Timeout, Transport: pooledTransport()}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		if c.Timeout == 0 {
			c.Timeout = cfg.Timeout
		}
		base = &c
	}
	rc := &retryablehttp.Client{HTTPClient: base, Logger: leveled{cfg.Logger},
		RetryWaitMin: cfg.RetryWaitMin, RetryWaitMax: cfg.RetryWaitMax, RetryMax: max(cfg.Retries, 0),
		CheckRetry: checkRetry, Backoff: retryablehttp.DefaultBackoff,
		ErrorHandler: retryablehttp.PassthroughErrorHandler}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	return &Client{http: &http.Client{Transport: &retryablehttp.RoundTripper{Client: rc}},
		base: strings.TrimSuffix(cfg.URL, "/"), token: cfg.Token, log: cfg.Logger, metrics: m}, nil
}

// checkRetry retries connection errors and 5xx answers, never a 4xx (a refusal does not get
// better by asking again), and stops when the caller's context is done.
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
	}
	return resp.StatusCode >= 500, nil
}

// leveled sends retryablehttp's log lines to zerolog at debug level.
type leveled struct{ log zerolog.Logger }

func (l leveled) Error(msg string, kv ...interface{}) { l.log.Debug().Fields(kv).Msg(msg) }
func (l leveled) Info(msg string, kv ...interface{})  { l.log.Debug().Fields(kv).Msg(msg) }
func (l leveled) Debug(msg string, kv ...interface{}) { l.log.Debug().Fields(kv).Msg(msg) }
func (l leveled) Warn(msg string, kv ...interface{})  { l.log.Debug().Fields(kv).Msg(msg) }

// request is one call of NetBox's REST API.
type request struct {
	op      string     // the metrics label (fleetd_netbox_requests_total{op})
	method  string     // GET, PATCH or POST
	path    string     // under the base URL, e.g. /api/dcim/devices/7/
	query   url.Values // nil for none
	body    any        // encoded as JSON when not nil: a go-netbox request model
	ifMatch string     // a conditional write's ETag: NetBox answers 412 when the object changed
}

// maxAnswer bounds what is read of one answer: a page of 1,000 devices is a few MiB.
const maxAnswer = 64 << 20

// do sends r through the retrying client and returns NetBox's answer and its body. An answer
// that is not 2xx is an error with NetBox's status and detail, wrapped with fleet's sentinels
// (404 → ErrNotFound, 412 → ErrConflict); its response is returned too.
//
// Requests are formed here, not with go-netbox's generated APIClient: fleetd uses go-netbox's
// request models for what it writes, and linking the APIClient linked all of NetBox's endpoints
// and every model they name, 22 MiB of the binary's 40 MiB of code that the Go linker cannot
// drop while anything in fleetd looks methods up by name (text/template, client-go's JSON):
// docs/operate.md, "Memory".
func (c *Client) do(ctx context.Context, r request) (*http.Response, []byte, error) {
	resp, err := c.send(ctx, r)
	if err != nil {
		return resp, nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if n := resp.ContentLength; n > 0 && n < maxAnswer {
		buf.Grow(int(n) + bytes.MinRead) // read in one allocation, with room to see the end
	}
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, maxAnswer)); err != nil {
		return resp, nil, fmt.Errorf("read NetBox's answer (%s): %w", resp.Status, err)
	}
	return resp, buf.Bytes(), nil
}

// send sends r and returns a 2xx answer with its body still to read (the caller closes it); any
// other answer is read, closed and returned with do's error.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, fmt.Errorf("encode the request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("form the request: %w", err)
	}
	req.Header.Set("Authorization", "Token "+c.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Accept-Language", "en-US") // NetBox's error details and labels in English
	req.Header.Set("User-Agent", "fleetd")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.ifMatch != "" {
		req.Header.Set("If-Match", r.ifMatch)
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	c.metrics.observe(r.op, start, resp, err)
	if err != nil {
		return nil, fmt.Errorf("NetBox did not answer: %w", err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10)) // the detail; an error is not worth more
	msg := fmt.Sprintf("NetBox answered %s", resp.Status)
	if detail := strings.TrimSpace(truncate(b)); detail != "" {
		msg += ": " + detail
	}
	if s := sentinel(resp.StatusCode); s != nil {
		return resp, fmt.Errorf("%s: %w", msg, s)
	}
	return resp, errors.New(msg)
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
