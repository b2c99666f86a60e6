// Package netbox is fleetd's NetBox adapter: it implements fleet.Inventory over the REST API
// with go-netbox (docs/design.md §2), and loads netbox-webhooks.yaml (schema.go).
//
// Trust: NetBox is the owner's source of truth; what it answers is the owner's declaration and
// is passed to fleet unvalidated (fleet validates declarations). The token is a secret and is
// never logged.
package netbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	nb "github.com/netbox-community/go-netbox/v4"
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
	// HTTPClient supplies the transport and the per-attempt timeout (default: a pooled client
	// with Timeout).
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

// Client talks to NetBox. It implements fleet.Inventory.
type Client struct {
	api     *nb.APIClient
	http    *http.Client // retrying, with If-Match from the context
	base    string
	token   string
	log     zerolog.Logger
	metrics *metrics
	noETag  sync.Once // the warning that NetBox sends no ETag, once per process
	// the warning that NetBox's status names a version before 4.6, once per process
	oldNetBox sync.Once
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
	base := &http.Client{Timeout: cfg.Timeout}
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
	hc := &http.Client{Transport: ifMatchTransport{next: &retryablehttp.RoundTripper{Client: rc}}}

	url := strings.TrimSuffix(cfg.URL, "/")
	nbcfg := nb.NewConfiguration()
	nbcfg.Servers[0].URL = url
	nbcfg.AddDefaultHeader("Authorization", "Token "+cfg.Token)
	nbcfg.AddDefaultHeader("Accept-Language", "en-US")
	nbcfg.HTTPClient = hc
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	return &Client{api: nb.NewAPIClient(nbcfg), http: hc, base: url, token: cfg.Token, log: cfg.Logger, metrics: m}, nil
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

// ifMatchKey carries the If-Match value of one conditional write from Update to the transport
// (go-netbox v4.3.0's generated API has no per-request header option).
type ifMatchKey struct{}

type ifMatchTransport struct {
	next http.RoundTripper
}

func (t ifMatchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if v, ok := r.Context().Value(ifMatchKey{}).(string); ok && v != "" {
		r = r.Clone(r.Context())
		r.Header.Set("If-Match", v)
	}
	return t.next.RoundTrip(r)
}

// leveled sends retryablehttp's log lines to zerolog at debug level.
type leveled struct{ log zerolog.Logger }

func (l leveled) Error(msg string, kv ...interface{}) { l.log.Debug().Fields(kv).Msg(msg) }
func (l leveled) Info(msg string, kv ...interface{})  { l.log.Debug().Fields(kv).Msg(msg) }
func (l leveled) Debug(msg string, kv ...interface{}) { l.log.Debug().Fields(kv).Msg(msg) }
func (l leveled) Warn(msg string, kv ...interface{})  { l.log.Debug().Fields(kv).Msg(msg) }

// answer describes NetBox's answer for an error message: status and the body's detail.
func answer(resp *http.Response, err error) string {
	var apiErr *nb.GenericOpenAPIError
	body := ""
	if errors.As(err, &apiErr) {
		body = strings.TrimSpace(string(apiErr.Body()))
		if len(body) > 300 {
			body = body[:300] + "…"
		}
	}
	if resp == nil {
		return err.Error()
	}
	if body == "" {
		return resp.Status
	}
	return resp.Status + ": " + body
}

// classify wraps an API error with fleet's sentinels (404 → ErrNotFound, 412 → ErrConflict).
func classify(what string, resp *http.Response, err error) error {
	if resp != nil {
		if s := sentinel(resp.StatusCode); s != nil {
			return fmt.Errorf("%s: NetBox answered %s: %w", what, answer(resp, err), s)
		}
	}
	return fmt.Errorf("%s: NetBox answered %s", what, answer(resp, err))
}

// decodeOnly reports whether err is go-netbox failing to decode a 2xx answer (its strict
// models), in which case the raw body is still good for the lenient decoder.
func decodeOnly(resp *http.Response, err error) ([]byte, bool) {
	var apiErr *nb.GenericOpenAPIError
	if resp == nil || resp.StatusCode < 200 || resp.StatusCode > 299 || !errors.As(err, &apiErr) {
		return nil, false
	}
	return apiErr.Body(), len(apiErr.Body()) > 0
}
