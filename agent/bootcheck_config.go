package agent

import (
	"flag"
	"io"
	"strings"

	"github.com/google/go-attestation/attest"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent/tpmconn"
	"github.com/folly-infra/fleetd/api"
)

// DefaultNodeDir is where an installed node keeps lak.pem and lak.blob from its enrollment.
const DefaultNodeDir = api.NodeDir

// BootCheckConfig is what `fleetd boot-check` needs. Zero values take the defaults documented on
// each field, which are what an installed node has.
type BootCheckConfig struct {
	Conn            // how to reach fleetd
	TPM      string // "" is /dev/tpmrm0; a device path, or "swtpm:HOST:PORT" (FLEETD_TPM)
	EventLog string // "" is /sys/kernel/security/tpm0/binary_bios_measurements (FLEETD_EVENT_LOG)
	Dir      string // "" is DefaultNodeDir: holds lak.pem and lak.blob (FLEETD_NODE_DIR)
	// Hardware is where the claims are read, as the enrollment reads them, so a swapped disk or
	// interface shows in fleet_facts; a check whose claims cannot be read sends none.
	Hardware
	// InstallOnly installs the node files delivered in their text form and checks nothing
	// (--install-only): no TPM, no fleetd URL needed.
	InstallOnly bool

	// Channel, when set, is the TPM to use instead of opening TPM (tests use the simulator). It
	// is closed by BootCheck.
	Channel attest.CommandChannelTPM20
	Log     zerolog.Logger
	// Install, when set, writes renewed certificates into Dir instead of the atomic writer
	// (InstallNodeFiles); tests cut a renewal with it.
	Install func(dir string, files []api.NodeFile) error
}

// withDefaults fills in the defaults and validates the configuration.
func (c BootCheckConfig) withDefaults() (BootCheckConfig, error) {
	if c.Dir == "" {
		c.Dir = DefaultNodeDir
	}
	if c.Install == nil {
		c.Install = InstallNodeFiles
	}
	if c.EventLog == "" {
		c.EventLog = tpmconn.DefaultEventLog
	}
	if c.InstallOnly {
		return c, nil
	}
	problems := c.Conn.defaults()
	if len(problems) > 0 {
		return c, &UsageError{Msg: strings.Join(problems, "; ")}
	}
	return c, nil
}

// ParseBootCheckArgs reads `fleetd boot-check`'s flags, each defaulting to its environment
// variable. --url is the same as --fleetd-url (the deploy files use it). Errors are *UsageError;
// -h or --help write the usage to stderr and return flag.ErrHelp.
func ParseBootCheckArgs(args []string, getenv func(string) string, stderr io.Writer) (BootCheckConfig, error) {
	var c BootCheckConfig
	fs := flag.NewFlagSet("fleetd boot-check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.Conn.addFlags(fs, getenv)
	fs.StringVar(&c.FleetdURL, "url", getenv("FLEETD_URL"), "the same as --fleetd-url")
	fs.StringVar(&c.TPM, "tpm", getenv("FLEETD_TPM"), "TPM device path or swtpm:HOST:PORT; /dev/tpmrm0 when empty (FLEETD_TPM)")
	fs.StringVar(&c.EventLog, "event-log", getenv("FLEETD_EVENT_LOG"), "measured-boot event log file; the kernel's when empty (FLEETD_EVENT_LOG)")
	c.Hardware.addFlags(fs, getenv)
	fs.StringVar(&c.Dir, "dir", getenv("FLEETD_NODE_DIR"), "the directory holding lak.pem and lak.blob from the enrollment; "+DefaultNodeDir+" when empty (FLEETD_NODE_DIR)")
	fs.BoolVar(&c.InstallOnly, "install-only", false, "only install the LDevID files the configuration delivered in their text form (Talos), without a check")
	err := c.Conn.parseFlags(fs, args) // before c is returned: it sets Retries
	return c, err
}
