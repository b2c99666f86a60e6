package fleet

import (
	"fmt"
	"strings"
	"sync"
)

// An enrollment refused before credential activation is a caller fleetd knows nothing about: the
// device name and the request id are readable in NetBox, so anyone on the lab network can send
// them. Such a refusal writes nothing to NetBox (a write would race the real machine's conditional
// writes, and a flood of them would fill the device's journal); it is logged and counted, and
// its code is kept here, so that when the request's Workflow fails the owner still reads why
// the machine was refused (docs/security.md, "A hostile host on the lab network").
//
// Trust: the code kept is the last refusal's for the request, whoever sent it: a forged
// challenge's code can replace the real machine's. Only the code is kept, never text the caller
// sent, and only its fixed sentence is written (PublicSentence). The memory is this process's:
// another fleetd instance, or this one after a restart, records the Workflow's failure without
// it (a refusal after activation is recorded in fleet_message, which any instance reads).

// refusalNote is the last refusal of a device's enrollment, for one request.
type refusalNote struct {
	request string
	code    string
}

// lastRefusals holds the last refusal per device. It holds at most one entry per NetBox device
// with a request waiting for attestation (a refusal is noted only after the device and the
// request were found), and an entry goes when the request's Workflow ends.
type lastRefusals struct {
	mu    sync.Mutex
	notes map[int64]refusalNote
}

// note keeps code as the last refusal of device id's request.
func (l *lastRefusals) note(id int64, request, code string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.notes == nil {
		l.notes = map[int64]refusalNote{}
	}
	l.notes[id] = refusalNote{request: request, code: code}
}

// take returns and forgets the last refusal code of device id's request, or "" when none is kept
// for that request.
func (l *lastRefusals) take(id int64, request string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.notes[id]
	if !ok {
		return ""
	}
	delete(l.notes, id)
	if n.request != request {
		return ""
	}
	return n.code
}

// refusalSentence is what a failed request's message says of its last refused attestation: the
// code and its fixed sentence. A refusal after activation writes it to fleet_message too.
func refusalSentence(device, code string) string {
	return fmt.Sprintf("Attestation of %s refused (%s): %s", device, code, PublicSentence(code))
}

// recordedRefusal is the refusal code a pending request's fleet_message records, read in this one
// place: the first parenthesised word of msg that is a code with a fixed sentence. Only the code is
// read back, never the sentence around it, so rewording refusalSentence (or the message an older
// fleetd wrote) changes nothing, and the failed request quotes the code's fixed sentence again,
// never the text NetBox holds: an owner's edit that names no code is not quoted at all.
func recordedRefusal(msg string) (code string, ok bool) {
	for rest := msg; ; {
		_, after, found := strings.Cut(rest, "(")
		if !found {
			return "", false
		}
		word, tail, closed := strings.Cut(after, ")")
		if !closed {
			return "", false
		}
		if _, known := publicSentences[word]; known {
			return word, true
		}
		rest = tail
	}
}
