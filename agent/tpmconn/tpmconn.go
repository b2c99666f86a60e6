// Package tpmconn opens the command channel to a TPM 2.0: the kernel's resource manager
// (/dev/tpmrm0) on a real machine, or a swtpm's TCP data channel in tests and the development
// stack (docs/design.md §7: "Both talk to /dev/tpmrm0 by default, or to a TPM given by flag").
//
// The channel is what go-attestation's attest.OpenConfig takes; the measured-boot event log
// comes from a file because the kernel exposes it there and a simulated machine keeps its own.
package tpmconn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-attestation/attest"
)

// DefaultDevice is the kernel's TPM resource manager, which lets several processes share the TPM
// and flushes what a process leaves loaded.
const DefaultDevice = "/dev/tpmrm0"

// DefaultEventLog is where the kernel exposes the firmware's measured-boot event log.
const DefaultEventLog = "/sys/kernel/security/tpm0/binary_bios_measurements"

// SwtpmPrefix marks a TPM spec that names a swtpm TCP data channel, as in "swtpm:127.0.0.1:2321".
const SwtpmPrefix = "swtpm:"

// Channel is an open TPM command channel and the path its event log is read from.
type Channel struct {
	io.ReadWriteCloser
	eventLogPath string
}

// MeasurementLog reads the event log file named when the channel was opened.
func (c *Channel) MeasurementLog() ([]byte, error) {
	b, err := os.ReadFile(c.eventLogPath)
	if err != nil {
		return nil, fmt.Errorf("read event log: %w", err)
	}
	return b, nil
}

var _ attest.CommandChannelTPM20 = (*Channel)(nil)

// Open opens the TPM named by spec: a character device path (DefaultDevice when spec is empty)
// or "swtpm:HOST:PORT" for a swtpm's data channel. eventLogPath names the measured-boot event log
// (DefaultEventLog when empty); it is read only when asked for.
func Open(spec, eventLogPath string) (*Channel, error) {
	if eventLogPath == "" {
		eventLogPath = DefaultEventLog
	}
	if spec == "" {
		spec = DefaultDevice
	}
	if addr, ok := strings.CutPrefix(spec, SwtpmPrefix); ok {
		rwc, err := DialSwtpm(addr)
		if err != nil {
			return nil, err
		}
		return &Channel{ReadWriteCloser: rwc, eventLogPath: eventLogPath}, nil
	}
	f, err := os.OpenFile(spec, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open TPM device %s: %w", spec, err)
	}
	return &Channel{ReadWriteCloser: f, eventLogPath: eventLogPath}, nil
}

// DialSwtpm connects to a swtpm data channel ("HOST:PORT", started with --server type=tcp).
// swtpm carries raw TPM command and response bytes over the stream; the returned connection
// hands each Read exactly one response (or its next part), which is what go-tpm's single-Read
// command runner needs.
func DialSwtpm(addr string) (io.ReadWriteCloser, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("connect to swtpm at %s: %w", addr, err)
	}
	return &framedConn{conn: c}, nil
}

// tpmHeaderSize is the size of a TPM 2.0 response header: tag (2), size (4), code (4).
const tpmHeaderSize = 10

// maxResponse bounds a response the conn accepts (TPM 2.0 responses are at most a few KiB).
const maxResponse = 1 << 20

// framedConn reads whole TPM responses from a stream so that one Read returns one response.
type framedConn struct {
	mu      sync.Mutex
	conn    net.Conn
	pending []byte // the unread rest of the last response
}

func (f *framedConn) Write(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = nil
	return f.conn.Write(b)
}

func (f *framedConn) Read(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pending) == 0 {
		resp, err := f.readResponse()
		if err != nil {
			return 0, err
		}
		f.pending = resp
	}
	n := copy(b, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

func (f *framedConn) readResponse() ([]byte, error) {
	hdr := make([]byte, tpmHeaderSize)
	if _, err := io.ReadFull(f.conn, hdr); err != nil {
		return nil, fmt.Errorf("read TPM response header: %w", err)
	}
	size := binary.BigEndian.Uint32(hdr[2:6])
	if size < tpmHeaderSize || size > maxResponse {
		return nil, fmt.Errorf("read TPM response: size field %d is out of range", size)
	}
	resp := make([]byte, size)
	copy(resp, hdr)
	if _, err := io.ReadFull(f.conn, resp[tpmHeaderSize:]); err != nil {
		return nil, fmt.Errorf("read TPM response body: %w", err)
	}
	return resp, nil
}

func (f *framedConn) Close() error {
	err := f.conn.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Version is the TPM family a machine has, as the agent reports it to fleetd.
type Version string

const (
	Version20      Version = "2.0"
	Version12      Version = "1.2"
	VersionUnknown Version = ""
)

// DefaultSysClassTPM is where the kernel describes each TPM it found.
const DefaultSysClassTPM = "/sys/class/tpm"

// DetectVersion reports the TPM family behind spec without sending it a command. A swtpm is
// always 2.0 here. For a device, the kernel's sysfs entry (under sysClassTPM, DefaultSysClassTPM
// when empty) answers: tpm_version_major, or the 1.2-only "caps" file on older kernels. A TPM 1.2
// has no resource manager, so /dev/tpmrm0 is missing on such machines; the entry of tpm0 is read
// then. VersionUnknown means no TPM was found.
func DetectVersion(spec, sysClassTPM string) Version {
	if strings.HasPrefix(spec, SwtpmPrefix) {
		return Version20
	}
	if sysClassTPM == "" {
		sysClassTPM = DefaultSysClassTPM
	}
	if spec == "" {
		spec = DefaultDevice
	}
	name := filepath.Base(spec) // tpmrm0 is the resource manager of tpm0
	if n, ok := strings.CutPrefix(name, "tpmrm"); ok {
		name = "tpm" + n
	}
	dir := sysClassTPM + "/" + name
	if b, err := os.ReadFile(dir + "/tpm_version_major"); err == nil {
		switch strings.TrimSpace(string(b)) {
		case "2":
			return Version20
		case "1":
			return Version12
		}
	}
	if _, err := os.Stat(dir + "/caps"); err == nil {
		return Version12
	}
	if _, err := os.Stat(spec); err == nil {
		return Version20
	}
	return VersionUnknown
}
