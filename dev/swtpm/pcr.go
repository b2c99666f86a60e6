package swtpm

import (
	"fmt"
	"io"
	"strings"

	"github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"
)

// evNoAction is EV_NO_ACTION: informational, never extended into a PCR.
const evNoAction = 0x03

// ExtendPCR extends one PCR of one bank with digest, as firmware measuring an event would.
// rw is any TPM command channel (a swtpm Instance's Open, or the go-tpm-tools simulator).
func ExtendPCR(rw io.ReadWriter, pcr int, alg attest.HashAlg, digest []byte) error {
	if err := tpm2.PCRExtend(rw, tpmutil.Handle(pcr), tpm2.Algorithm(alg), digest, ""); err != nil {
		return fmt.Errorf("extend PCR %d (%v): %w", pcr, alg, err)
	}
	return nil
}

// ReplayEventLog extends the PCRs with every measured event of a TCG event log, in order, for
// each bank that both the log and the TPM carry. Afterwards the TPM's PCRs are what the firmware
// that wrote the log would have left, so a quote and the log verify together: this is how a
// simulated machine's boot becomes measurable (replaying a different log later models a changed
// boot). The TPM's PCRs must be fresh (just started); a log that needs a non-zero startup
// locality cannot be replayed through TPM2_PCR_Extend and is refused.
func ReplayEventLog(rw io.ReadWriter, eventLog []byte) error {
	el, err := attest.ParseEventLog(eventLog)
	if err != nil {
		return fmt.Errorf("replay event log: %w", err)
	}
	active, err := activeBanks(rw)
	if err != nil {
		return err
	}
	replayed := 0
	for _, alg := range el.Algs {
		if !active[tpm2.Algorithm(alg)] {
			continue
		}
		if err := replayBank(rw, el.Events(alg), alg); err != nil {
			return err
		}
		replayed++
	}
	if replayed == 0 {
		return fmt.Errorf("replay event log: the log's banks %v are not active on the TPM", el.Algs)
	}
	return nil
}

func replayBank(rw io.ReadWriter, events []attest.Event, alg attest.HashAlg) error {
	for i, e := range events {
		if e.Type == evNoAction {
			if e.Index == 0 && strings.HasPrefix(string(e.Data), "StartupLocality") && e.Data[len(e.Data)-1] != 0 {
				return fmt.Errorf("replay event log: it starts PCR 0 at locality %d, which PCR_Extend cannot reproduce", e.Data[len(e.Data)-1])
			}
			continue
		}
		if len(e.Digest) == 0 {
			return fmt.Errorf("replay event log: event %d (%v, PCR %d) has no %v digest", i, e.Type, e.Index, alg)
		}
		if err := ExtendPCR(rw, e.Index, alg, e.Digest); err != nil {
			return fmt.Errorf("replay event log: event %d: %w", i, err)
		}
	}
	return nil
}

// activeBanks lists the PCR banks that have PCRs allocated.
func activeBanks(rw io.ReadWriter) (map[tpm2.Algorithm]bool, error) {
	caps, _, err := tpm2.GetCapability(rw, tpm2.CapabilityPCRs, 1024, 0)
	if err != nil {
		return nil, fmt.Errorf("read the TPM's PCR banks: %w", err)
	}
	out := map[tpm2.Algorithm]bool{}
	for _, c := range caps {
		if sel, ok := c.(tpm2.PCRSelection); ok && len(sel.PCRs) > 0 {
			out[sel.Hash] = true
		}
	}
	return out, nil
}

// ReplayEventLog replays eventLog into the running instance's PCRs (see the package function).
func (i *Instance) ReplayEventLog(eventLog []byte) error {
	rw, err := i.Open()
	if err != nil {
		return err
	}
	defer rw.Close()
	return ReplayEventLog(rw, eventLog)
}
