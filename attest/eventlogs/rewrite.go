package eventlogs

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// RHEL8OtherKernel is RHEL8SecureBoot with another kernel: the kernel's measurements (its EFI
// image in PCR 4, the file grub read in PCR 9) have other digests, in every bank. Replayed into a
// TPM it verifies like the real boot, so it is what a machine looks like that a DHCP race winner
// booted with its own kernel (the boot policy refuses it).
func RHEL8OtherKernel() []byte {
	b, err := ReplaceDigests(RHEL8SecureBoot, Event{PCR: 4, N: 4}, Event{PCR: 9, N: 0})
	if err != nil {
		panic(fmt.Sprintf("eventlogs: rewrite the RHEL 8 log: %v", err))
	}
	return b
}

// Event names one event of a log: the N-th (from 0) measured into PCR.
type Event struct {
	PCR uint32
	N   int
}

// ReplaceDigests returns a copy of a crypto-agile TCG event log (TCG PC Client PFP 1.05 §10.2)
// whose named events carry other digests in every bank (each the bank's size of SHA-256 over
// "other " and the old digest), so that the log describes a boot that measured something else.
func ReplaceDigests(log []byte, events ...Event) ([]byte, error) {
	out := bytes.Clone(log)
	sizes, off, err := specIDSizes(out)
	if err != nil {
		return nil, err
	}
	seen := map[uint32]int{}
	for off < len(out) {
		if len(out)-off < 12 {
			return nil, errors.New("truncated event header")
		}
		pcr := binary.LittleEndian.Uint32(out[off:])
		count := int(binary.LittleEndian.Uint32(out[off+8:]))
		p := off + 12
		replace := false
		for _, e := range events {
			replace = replace || e.PCR == pcr && e.N == seen[pcr]
		}
		seen[pcr]++
		for range count {
			if len(out)-p < 2 {
				return nil, errors.New("truncated digest")
			}
			size, ok := sizes[binary.LittleEndian.Uint16(out[p:])]
			if !ok || len(out)-p-2 < size {
				return nil, fmt.Errorf("digest of unknown algorithm 0x%x or truncated", binary.LittleEndian.Uint16(out[p:]))
			}
			if replace {
				sum := sha256.Sum256(append([]byte("other "), out[p+2:p+2+size]...))
				copy(out[p+2:p+2+size], bytes.Repeat(sum[:], size/len(sum)+1))
			}
			p += 2 + size
		}
		if len(out)-p < 4 {
			return nil, errors.New("truncated event size")
		}
		off = p + 4 + int(binary.LittleEndian.Uint32(out[p:]))
	}
	return out, nil
}

// specIDSizes reads the digest sizes from the log's first event (the SHA-1 format
// TCG_EfiSpecIDEvent) and returns them with the offset of the second event.
func specIDSizes(log []byte) (map[uint16]int, int, error) {
	const hdr = 32 // PCRIndex, EventType, SHA-1 digest, EventSize
	if len(log) < hdr {
		return nil, 0, errors.New("no first event")
	}
	size := int(binary.LittleEndian.Uint32(log[28:]))
	ev := log[hdr:]
	if len(ev) < size || size < 28 || !bytes.HasPrefix(ev, []byte("Spec ID Event03")) {
		return nil, 0, errors.New("the first event is not a crypto-agile Spec ID Event03")
	}
	n := int(binary.LittleEndian.Uint32(ev[24:]))
	if size < 28+4*n {
		return nil, 0, errors.New("the Spec ID event is truncated")
	}
	sizes := map[uint16]int{}
	for i := range n {
		a := ev[28+4*i:]
		sizes[binary.LittleEndian.Uint16(a)] = int(binary.LittleEndian.Uint16(a[2:]))
	}
	return sizes, hdr + size, nil
}
