package fleet

import (
	"errors"
	"fmt"

	"github.com/folly-infra/fleetd/attest"
)

// Two kinds of error leave the domain (docs/http.md, "Conventions"): a refusal, when the device or the caller
// is wrong (the adapters answer 4xx with its safe message, and a journal entry records it where it
// concerns a device), and any other error, when fleetd or what it depends on failed (5xx, full
// detail in the log only). A refusal is a *Refusal, or an *attest.Refusal as attest's check
// returned it (the enrollment's and the boot check's evidence). The domain returns either as it
// is; AsRefusal is the one place both are read as one, and the adapters call it at the edge
// (as SPIRE's api.MakeErr turns an error into its status once, in the API layer).

// RefusalClass says which kind of caller mistake a refusal is; adapters map it to a status code.
type RefusalClass int

const (
	RefusedInvalid   RefusalClass = iota + 1 // the request is malformed or its evidence does not verify
	RefusedForbidden                         // the caller is not who may do this
	RefusedNotFound                          // nothing fleetd knows matches the request
	RefusedConflict                          // the device is not in a state that allows this now
	RefusedGone                              // what was asked for existed and is gone for good
	RefusedTooLarge                          // the request is larger than its route takes
)

// Refusal is a decision against the caller. Code is a stable machine-readable word
// ("unknown_device", "config_delivered"), Msg one safe sentence that names what was wrong and
// what to do. Err, when set, holds detail for the log that must not reach the caller.
type Refusal struct {
	Class RefusalClass
	Code  string
	Msg   string
	Err   error
}

func (r *Refusal) Error() string {
	if r.Err != nil {
		return fmt.Sprintf("%s: %s: %v", r.Code, r.Msg, r.Err)
	}
	return r.Code + ": " + r.Msg
}

func (r *Refusal) Unwrap() error { return r.Err }

// Refuse builds a refusal.
func Refuse(class RefusalClass, code, format string, args ...any) *Refusal {
	return &Refusal{Class: class, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// AsRefusal returns the refusal in err's chain, if any: a *Refusal as it is, an *attest.Refusal
// as the invalid request (400) whose code is its check and whose message is attest's.
func AsRefusal(err error) (*Refusal, bool) {
	var r *Refusal
	if errors.As(err, &r) {
		return r, true
	}
	if ar, ok := attest.AsRefusal(err); ok {
		return &Refusal{Class: RefusedInvalid, Code: string(ar.Check), Msg: ar.Msg, Err: err}, true
	}
	return nil, false
}

// ErrTemplate is wrapped by an Installer when the class's Template cannot carry a request
// (missing, unparsable, a zero timeout, or a first action that is not the fleetd agent). The
// request then fails with the installer's message instead of being retried.
var ErrTemplate = errors.New("template cannot carry the request")

// codeOf is the refusal code of err, or "error" for any other error.
func codeOf(err error) string {
	if r, ok := AsRefusal(err); ok {
		return r.Code
	}
	return "error"
}
