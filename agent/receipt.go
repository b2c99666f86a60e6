package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/go-attestation/attest"
	"github.com/rs/zerolog"

	"github.com/folly-infra/fleetd/agent/tpmconn"
	"github.com/folly-infra/fleetd/api"
	fattest "github.com/folly-infra/fleetd/attest"
)

// The files of a wipe's or a retirement's receipt in the Workflow's shared directory: `fleetd
// enroll` writes the receipt grant and the AK's blob when fleetd accepts the attestation, the
// wipe program writes its report after the erase, and `fleetd wipe-receipt` reads all three.
const (
	FileReceipt    = "receipt.json"    // the grant (token, nonce) and the device and request it is for
	FileReceiptAK  = "receipt-ak.blob" // the AK the attestation activated (go-attestation AK.Marshal())
	FileWipeResult = api.WipeResultFile
)

// receiptFile is what FileReceipt holds.
type receiptFile struct {
	Device  string `json:"device"`
	Request string `json:"request"`
	Token   string `json:"token"`
	Nonce   []byte `json:"nonce"`
}

// receiptFiles are the files `fleetd enroll` writes for the receipt, before the disk
// authorization.
func receiptFiles(cfg EnrollConfig, g *api.ReceiptGrant, akBlob []byte) ([]workflowFile, error) {
	b, err := json.Marshal(receiptFile{Device: cfg.Device, Request: cfg.Request, Token: g.Token, Nonce: g.Nonce})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", FileReceipt, err)
	}
	return []workflowFile{{FileReceiptAK, akBlob, 0o600}, {FileReceipt, b, 0o600}}, nil
}

// WipeReceiptConfig is what `fleetd wipe-receipt` needs. Zero values take the defaults documented
// on each field, which are what a HookOS Workflow action has.
type WipeReceiptConfig struct {
	Conn               // how to reach fleetd
	TPM         string // "" is /dev/tpmrm0; a device path, or "swtpm:HOST:PORT" (FLEETD_TPM)
	WorkflowDir string // "" is /workflow (FLEETD_WORKFLOW_DIR)
	// Channel, when set, is the TPM to use instead of opening TPM (tests use the simulator). It
	// is closed by WipeReceipt.
	Channel attest.CommandChannelTPM20
	Log     zerolog.Logger
}

// WipeReceipt runs `fleetd wipe-receipt`, the step after a wipe's or a retirement's erase
// (docs/http.md, "Wipe receipts"): it reads the receipt grant and the AK's blob `fleetd enroll`
// kept and the wipe program's report, loads the AK in the TPM, quotes the SHA-256 PCRs over the
// receipt's extraData (attest.ReceiptExtraData of the grant's nonce and the report) and sends the
// receipt to fleetd. It returns nil when fleetd took the receipt; otherwise an error ExitCode maps
// (a missing or malformed file is a local failure, exit 1: the erase reported nothing fleetd
// could verify).
func WipeReceipt(ctx context.Context, cfg WipeReceiptConfig) error {
	if cfg.WorkflowDir == "" {
		cfg.WorkflowDir = "/workflow"
	}
	if problems := cfg.Conn.defaults(); len(problems) > 0 {
		return &UsageError{Msg: strings.Join(problems, "; ")}
	}
	grant, blob, report, err := readReceiptFiles(cfg.WorkflowDir)
	if err != nil {
		return err
	}
	log := cfg.Log.With().Str("device", grant.Device).Str("request", grant.Request).Logger()
	ch := cfg.Channel
	if ch == nil {
		if ch, err = tpmconn.Open(cfg.TPM, ""); err != nil {
			return &TPMError{Op: "open TPM", Err: err}
		}
	}
	tpm, err := OpenTPM(ch)
	if err != nil {
		_ = ch.Close()
		return &TPMError{Op: "open TPM", Err: err}
	}
	defer tpm.Close()
	q, err := quoteReceipt(tpm, blob, grant.Nonce, report)
	if err != nil {
		return err
	}
	req := api.ReceiptRequest{Device: grant.Device, Token: grant.Token, Request: grant.Request, DiskSerial: report.DiskSerial,
		Method: report.Method, Result: report.Result, Bytes: report.Bytes, Quote: api.Quote{Quote: q.Quote, Signature: q.Signature}}
	var res api.ReceiptResponse
	if err := cfg.Conn.client(log).post(ctx, api.PathWipeReceipt, req, &res); err != nil {
		return err
	}
	log.Info().Str("step", "receipt").Str("outcome", res.Result).Str("disk_serial", report.DiskSerial).Str("method", report.Method).
		Uint64("bytes", report.Bytes).Msg("fleetd verified the wipe receipt")
	return nil
}

// quoteReceipt loads the AK from its blob and quotes the SHA-256 PCRs over the receipt's extraData.
func quoteReceipt(tpm *TPM, blob, nonce []byte, report fattest.WipeReport) (*attest.Quote, error) {
	extra, err := fattest.ReceiptExtraData(nonce, report)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", FileWipeResult, err)
	}
	ak, err := tpm.Attest().LoadAK(blob)
	if err != nil {
		return nil, &TPMError{Op: "load the attestation's AK from " + FileReceiptAK, Err: err}
	}
	defer ak.Close(tpm.Attest())
	q, err := tpm.QuoteReceipt(ak, extra)
	if err != nil {
		return nil, &TPMError{Op: "quote", Err: err}
	}
	return q, nil
}

// readReceiptFiles reads the grant, the AK's blob and the wipe program's report. A missing file
// says which step did not leave it.
func readReceiptFiles(dir string) (receiptFile, []byte, fattest.WipeReport, error) {
	var g receiptFile
	read := func(name, missing string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s is missing from %s: %s; the wipe is not confirmed", name, dir, missing)
		}
		return b, err
	}
	b, err := read(FileReceipt, "fleetd enroll handed over no receipt grant (an attestation of a wipe or retirement by this fleetd leaves one)")
	if err != nil {
		return g, nil, fattest.WipeReport{}, err
	}
	if err := json.Unmarshal(b, &g); err != nil || g.Token == "" || len(g.Nonce) == 0 || g.Device == "" || g.Request == "" {
		return g, nil, fattest.WipeReport{}, fmt.Errorf("%s does not hold the grant fleetd enroll writes (device, request, token, nonce): %v", FileReceipt, err)
	}
	blob, err := read(FileReceiptAK, "fleetd enroll kept no AK")
	if err != nil {
		return g, nil, fattest.WipeReport{}, err
	}
	b, err = read(FileWipeResult, "the erase action reported nothing (it writes serial, method, result and bytes there after it erased)")
	if err != nil {
		return g, nil, fattest.WipeReport{}, err
	}
	report, err := ParseWipeResult(b)
	if err != nil {
		return g, nil, fattest.WipeReport{}, fmt.Errorf("%s: %w", FileWipeResult, err)
	}
	return g, blob, report, nil
}

// ParseWipeResult reads the wipe program's report (docs/operate.md, "The wipe receipt step"):
// lines `key=value` with the keys serial, method, result and bytes, each exactly once; blank lines
// and lines beginning with # are skipped; any other key is refused, so a misspelt one is not
// silently dropped. bytes is a decimal count.
func ParseWipeResult(b []byte) (fattest.WipeReport, error) {
	var r fattest.WipeReport
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return r, fmt.Errorf("line %d is not key=value", n)
		}
		if seen[key] {
			return r, fmt.Errorf("line %d: %s is given twice", n, key)
		}
		seen[key] = true
		switch key {
		case "serial":
			r.DiskSerial = value
		case "method":
			r.Method = value
		case "result":
			r.Result = value
		case "bytes":
			v, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				return r, fmt.Errorf("line %d: bytes %.40q is not a decimal count", n, value)
			}
			r.Bytes = v
		default:
			return r, fmt.Errorf("line %d: unknown key %.40q (the keys are serial, method, result, bytes)", n, key)
		}
	}
	if err := sc.Err(); err != nil {
		return r, err
	}
	for _, k := range []string{"serial", "method", "result", "bytes"} {
		if !seen[k] {
			return r, fmt.Errorf("no %s= line (the keys are serial, method, result, bytes)", k)
		}
	}
	return r, nil
}
