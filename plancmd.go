package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/config"
)

// plan asks the running fleetd what a device's request would do (GET /v1/devices/{name}/plan,
// docs/http.md "Plan a request") and prints it: human text, or the JSON with -o json. Exit
// status 0 when the request would be carried out (or there is none), 1 when it would be
// refused, rejected or fail before anything runs, 2 when no plan could be had.
func plan(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: fleetd plan [flags] DEVICE\n\nWhat fleetd would do for DEVICE's request, or for --action; writes nothing.")
		fs.PrintDefaults()
	}
	var o operatorFlags
	o.register(fs)
	action := fs.String("action", "", "plan this action (provision, attest, wipe, retire) instead of the request NetBox holds")
	format := fs.String("o", "text", "output: text or json")
	device, err := parseWithOneArg(fs, args)
	if err != nil {
		fmt.Fprintln(stderr, "fleetd plan:", err)
		return 2
	}
	if *format != "text" && *format != "json" {
		fmt.Fprintf(stderr, "fleetd plan: -o %q: want text or json\n", *format)
		return 2
	}
	c, err := o.client()
	if err != nil {
		fmt.Fprintln(stderr, "fleetd plan:", err)
		return 2
	}
	q := url.Values{}
	if *action != "" {
		q.Set("action", *action)
	}
	var p api.Plan
	body, err := c.get(ctx, "/v1/devices/"+url.PathEscape(device)+"/plan", q, &p)
	if err != nil {
		fmt.Fprintln(stderr, "fleetd plan:", err)
		return 2
	}
	if *format == "json" {
		stdout.Write(body)
	} else {
		printPlan(stdout, p)
	}
	switch p.Outcome {
	case "rejected", "still-rejected", "template-fails":
		return 1
	}
	return 0
}

// parseWithOneArg parses flags before and after the one positional argument.
func parseWithOneArg(fs *flag.FlagSet, args []string) (string, error) {
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if fs.NArg() == 0 {
		return "", errors.New("name the device")
	}
	arg, rest := fs.Arg(0), fs.Args()[1:]
	if err := fs.Parse(rest); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("one device only, not also %q", fs.Arg(0))
	}
	return arg, nil
}

// operatorFlags say how a CLI command reaches the operator API: from fleetd.yaml (public_url,
// tls.cert as the CA to trust, operator.token_file), each overridden by its flag; with --url and
// --token-file the config is not read (no --ca: the system's roots).
type operatorFlags struct {
	config, url, ca, tokenFile string
}

func (o *operatorFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.config, "config", "/etc/fleetd/fleetd.yaml", "fleetd's config: where fleetd is, its certificate and the operator token")
	fs.StringVar(&o.url, "url", "", "fleetd's URL (default: the config's public_url)")
	fs.StringVar(&o.ca, "ca", "", "PEM certificates to trust for fleetd's TLS (default: the config's tls.cert)")
	fs.StringVar(&o.tokenFile, "token-file", "", "the operator token's file (default: the config's operator.token_file)")
}

// operatorClient calls fleetd's operator routes.
type operatorClient struct {
	base  string
	token string
	http  *http.Client
}

func (o *operatorFlags) client() (*operatorClient, error) {
	if o.url == "" || o.tokenFile == "" { // with both given, the CA too comes from its flag only
		cfg, err := config.Load(o.config, config.Override{SkipFiles: true})
		if err != nil {
			return nil, fmt.Errorf("%w (or give --url, --ca and --token-file)", err)
		}
		if o.url == "" {
			o.url = cfg.PublicURL
		}
		if o.ca == "" && cfg.TLS.Cert != "" {
			o.ca = cfg.Path(cfg.TLS.Cert)
		}
		if o.tokenFile == "" {
			o.tokenFile = cfg.Path(cfg.Operator.TokenFile)
		}
	}
	tok, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("read the operator token: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if o.ca != "" {
		pem, err := os.ReadFile(o.ca)
		if err != nil {
			return nil, fmt.Errorf("read the CA to trust: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", o.ca)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &operatorClient{base: strings.TrimSuffix(o.url, "/"), token: strings.TrimSpace(string(tok)),
		http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
}

// get GETs path and decodes the 200 body into v, returning the body; a refusal is an error
// with fleetd's code and sentence.
func (c *operatorClient) get(ctx context.Context, path string, q url.Values, v any) ([]byte, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask fleetd: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("read fleetd's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		if json.Unmarshal(body, &e) == nil && e.Code != "" {
			return nil, fmt.Errorf("fleetd refused (%d %s): %s", resp.StatusCode, e.Code, e.Message)
		}
		return nil, fmt.Errorf("fleetd answered %s", resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return nil, fmt.Errorf("decode fleetd's answer: %w", err)
	}
	return body, nil
}
