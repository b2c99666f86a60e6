package agent

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-attestation/attest"
	"github.com/rs/zerolog"
)

// EnrollConfig is what `fleetd enroll` needs. Zero values take the defaults documented on each
// field, which are what a HookOS Workflow action has.
type EnrollConfig struct {
	Conn          // how to reach fleetd
	Device string // the NetBox device name the Workflow gives (required; FLEETD_DEVICE)
	// Request is the id of the request the Workflow carries out (required; FLEETD_REQUEST):
	// fleetd refuses an enrollment for any other request than the device's current one, so a
	// stale Workflow run late cannot enroll for a newer request (docs/security.md).
	Request string

	TPM         string // "" is /dev/tpmrm0; a device path, or "swtpm:HOST:PORT" (FLEETD_TPM)
	EventLog    string // "" is SysRoot/kernel/security/tpm0/binary_bios_measurements
	SysRoot     string // "" is /sys: dmi/id (SMBIOS), block (disk serials), class/tpm (FLEETD_SYSFS)
	DevRoot     string // "" is /dev: disk/by-id (FLEETD_DEVFS)
	WorkflowDir string // "" is /workflow (FLEETD_WORKFLOW_DIR)
	// MAC and RouteFile are as in Hardware: the MAC claimed as it netbooted (FLEETD_MAC), else the
	// default route's interface's.
	MAC       string
	RouteFile string

	// Channel, when set, is the TPM to use instead of opening TPM (tests use the simulator). It
	// is closed by Enroll.
	Channel attest.CommandChannelTPM20
	Log     zerolog.Logger
}

// Conn is how the agent reaches fleetd, the same for `fleetd enroll` and `fleetd boot-check`.
// Zero values take the defaults documented on each field.
type Conn struct {
	FleetdURL string        // fleetd's base URL, e.g. "https://spore.lan:8443" (required; FLEETD_URL)
	CAFile    string        // PEM roots for fleetd's TLS certificate; "" uses the system roots (FLEETD_CA_FILE)
	Timeout   time.Duration // per HTTP request; 30s when zero
	Retries   int           // retries on connection errors, 5xx and 429; 5 when zero, none when negative
	RetryWait time.Duration // the first retry's wait, doubling up to 30s; 1s when zero
	// HTTPClient, when set, replaces the client built from Timeout and CAFile.
	HTTPClient *http.Client
}

// withDefaults fills in the defaults and validates the configuration. The defaulted
// configuration is returned even with an error, so that Enroll can still clear the workflow
// directory's disk authorization.
func (c EnrollConfig) withDefaults() (EnrollConfig, error) {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.SysRoot, "/sys")
	def(&c.DevRoot, "/dev")
	def(&c.WorkflowDir, "/workflow")
	def(&c.EventLog, filepath.Join(c.SysRoot, "kernel/security/tpm0/binary_bios_measurements"))
	problems := c.Conn.defaults()
	if strings.TrimSpace(c.Device) == "" {
		problems = append(problems, "no device name (set --device or FLEETD_DEVICE from the Workflow's hardwareMap)")
	}
	if strings.TrimSpace(c.Request) == "" {
		problems = append(problems, "no request id (set --request or FLEETD_REQUEST from the Workflow's hardwareMap request)")
	}
	if len(problems) > 0 {
		return c, &UsageError{Msg: strings.Join(problems, "; ")}
	}
	return c, nil
}

// defaults fills in the connection defaults (timeout 30s, 5 retries, first wait 1s, the HTTP
// client from the CA file) and lists what is wrong. The URL loses its trailing slashes.
func (c *Conn) defaults() []string {
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Retries == 0 {
		c.Retries = 5
	} else if c.Retries < 0 {
		c.Retries = 0
	}
	if c.RetryWait == 0 {
		c.RetryWait = time.Second
	}
	var problems []string
	u, err := url.Parse(c.FleetdURL)
	if c.FleetdURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		problems = append(problems, fmt.Sprintf("the fleetd URL %q is not an http(s) URL (set --fleetd-url or FLEETD_URL)", c.FleetdURL))
	}
	if c.HTTPClient == nil {
		if c.HTTPClient, err = newHTTPClient(c.CAFile, c.Timeout); err != nil {
			problems = append(problems, err.Error())
		}
	}
	c.FleetdURL = strings.TrimRight(c.FleetdURL, "/")
	return problems
}

// addFlags registers the connection's flags, each defaulting to its environment variable.
func (c *Conn) addFlags(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&c.FleetdURL, "fleetd-url", getenv("FLEETD_URL"), "fleetd's base URL (FLEETD_URL)")
	fs.StringVar(&c.CAFile, "ca-file", getenv("FLEETD_CA_FILE"), "PEM roots for fleetd's TLS certificate (FLEETD_CA_FILE)")
	fs.DurationVar(&c.Timeout, "timeout", 30*time.Second, "timeout of each request to fleetd")
	fs.IntVar(&c.Retries, "retries", 5, "retries on connection errors, 5xx and 429 (rate limited)")
}

// parseFlags parses a command's flags, refuses extra arguments, and turns --retries 0 into no
// retries (a zero Conn.Retries means the default). Errors are *UsageError.
func (c *Conn) parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return err // the usage asked for is written: not a misuse
	} else if err != nil {
		return &UsageError{Msg: err.Error()}
	}
	if fs.NArg() > 0 {
		return &UsageError{Msg: fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	if c.Retries == 0 {
		c.Retries = -1
	}
	return nil
}

// client is the fleetd client of a defaulted Conn.
func (c *Conn) client(log zerolog.Logger) *client {
	return &client{base: c.FleetdURL, http: c.HTTPClient, retries: c.Retries, wait: c.RetryWait, log: log}
}

func newHTTPClient(caFile string, timeout time.Duration) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read fleetd CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("fleetd CA file %s holds no PEM certificate", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}

// ParseEnrollArgs reads `fleetd enroll`'s flags, each defaulting to its environment variable,
// which is how a Tinkerbell Template passes the hardwareMap to the action. Errors are
// *UsageError, after the flag package's complaint and the usage are written to stderr; -h or
// --help write the usage there and return flag.ErrHelp.
func ParseEnrollArgs(args []string, getenv func(string) string, stderr io.Writer) (EnrollConfig, error) {
	var c EnrollConfig
	fs := flag.NewFlagSet("fleetd enroll", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.Conn.addFlags(fs, getenv)
	fs.StringVar(&c.Device, "device", getenv("FLEETD_DEVICE"), "the NetBox device name (FLEETD_DEVICE)")
	fs.StringVar(&c.Request, "request", getenv("FLEETD_REQUEST"), "the id of the request the Workflow carries out (FLEETD_REQUEST)")
	fs.StringVar(&c.TPM, "tpm", getenv("FLEETD_TPM"), "TPM device path or swtpm:HOST:PORT; /dev/tpmrm0 when empty (FLEETD_TPM)")
	fs.StringVar(&c.EventLog, "event-log", getenv("FLEETD_EVENT_LOG"), "measured-boot event log file (FLEETD_EVENT_LOG)")
	fs.StringVar(&c.SysRoot, "sysfs", getenv("FLEETD_SYSFS"), "sysfs root, /sys when empty (FLEETD_SYSFS)")
	fs.StringVar(&c.DevRoot, "devfs", getenv("FLEETD_DEVFS"), "device root, /dev when empty (FLEETD_DEVFS)")
	fs.StringVar(&c.MAC, "mac", getenv("FLEETD_MAC"), "the MAC to claim; the default route's interface's when empty (FLEETD_MAC)")
	fs.StringVar(&c.WorkflowDir, "workflow-dir", getenv("FLEETD_WORKFLOW_DIR"), "where to write the enrollment's files, /workflow when empty (FLEETD_WORKFLOW_DIR)")
	err := c.Conn.parseFlags(fs, args) // before c is returned: it sets Retries
	return c, err
}

// ParseWipeReceiptArgs reads `fleetd wipe-receipt`'s flags, each defaulting to its environment
// variable, as ParseEnrollArgs does. The device and request come from the receipt grant `fleetd
// enroll` wrote, not from flags. Errors are *UsageError.
func ParseWipeReceiptArgs(args []string, getenv func(string) string, stderr io.Writer) (WipeReceiptConfig, error) {
	var c WipeReceiptConfig
	fs := flag.NewFlagSet("fleetd wipe-receipt", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.Conn.addFlags(fs, getenv)
	fs.StringVar(&c.TPM, "tpm", getenv("FLEETD_TPM"), "TPM device path or swtpm:HOST:PORT; /dev/tpmrm0 when empty (FLEETD_TPM)")
	fs.StringVar(&c.WorkflowDir, "workflow-dir", getenv("FLEETD_WORKFLOW_DIR"), "where fleetd enroll and the wipe left the receipt's files, /workflow when empty (FLEETD_WORKFLOW_DIR)")
	err := c.Conn.parseFlags(fs, args)
	return c, err
}
