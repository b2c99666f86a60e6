package fleet

import (
	"encoding/base32"
	"fmt"
	"io"
	"strings"
)

// A request id is "<action>-<8 random base32 characters>", for example "provision-k3f9x2mq".
// It names the action so that fleetd can tell, from NetBox alone, what the last request was
// (a failed retirement is not retried on its own).

var requestEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewRequestID draws a new request id for action.
func NewRequestID(action Action, rnd io.Reader) (string, error) {
	b := make([]byte, 5)
	if _, err := io.ReadFull(rnd, b); err != nil {
		return "", fmt.Errorf("draw request id: %w", err)
	}
	return string(action) + "-" + requestEncoding.EncodeToString(b), nil
}

// RequestAction returns the action a request id names, or ActionNone for an id fleetd did not make.
func RequestAction(id string) Action {
	a, _, ok := strings.Cut(id, "-")
	if !ok {
		return ActionNone
	}
	if !validAction(Action(a)) {
		return ActionNone
	}
	return Action(a)
}

// WorkflowName is the deterministic name of a request's Workflow: the device name and the
// request id. Creating it twice creates one Workflow.
func WorkflowName(device, request string) string {
	return device + "-" + request
}
