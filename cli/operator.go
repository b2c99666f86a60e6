package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
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

// operatorCommand is what the CLI commands that ask fleetd's operator API share (`fleetd plan`,
// `fleetd inventory check`): the flags that say how to reach it (operatorFlags) and -o, their
// checks, the exit status 2 of a command that could not ask, and the output.
type operatorCommand struct {
	name   string // as the messages name it: "plan", "inventory check"
	flags  *flag.FlagSet
	conn   operatorFlags
	format *string
	stderr io.Writer
}

// newOperatorCommand is the command's flag set with the operator flags and -o registered; usage
// is its first lines of help, before the flags.
func newOperatorCommand(name, usage string, stderr io.Writer) *operatorCommand {
	fs := NewFlagSet(name, usage)
	c := &operatorCommand{name: name, flags: fs, stderr: stderr}
	c.conn.register(fs)
	c.format = fs.String("o", "text", "output: text or json")
	return c
}

// fail says what stopped the command, after its name, and is its exit status: 2.
func (c *operatorCommand) fail(err error) int {
	fmt.Fprintf(c.stderr, "fleetd %s: %v\n", c.name, err)
	return 2
}

// client checks -o and returns the operator API's client, or the error that stops the command.
func (c *operatorCommand) client() (*operatorClient, error) {
	if *c.format != "text" && *c.format != "json" {
		return nil, fmt.Errorf("-o %q: want text or json", *c.format)
	}
	return c.conn.client()
}

// write prints fleetd's answer: its JSON as fleetd sent it with -o json, else text.
func (c *operatorCommand) write(w io.Writer, body []byte, text func(io.Writer)) {
	if *c.format == "json" {
		_, _ = w.Write(body) // as the text form's prints: a closed stdout has no one to tell
		return
	}
	text(w)
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
