package kea

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Kea's control channel (Kea ARM "Management API"): the server listens on a unix socket named in
// its "control-socket"; a client connects, writes one JSON command, and reads one JSON answer
// until Kea closes the connection. The answer is {"result": N, "text": "...", "arguments": {...}}
// where result 0 is success, 1 an error, 2 an unsupported command and 3 an empty result.

// maxAnswer bounds how much of an answer is read (config-get returns the whole configuration).
const maxAnswer = 16 << 20

// ErrKeaRefused is wrapped when Kea answers a command with a non-zero result.
var ErrKeaRefused = errors.New("kea refused the command")

// answer is one Kea control channel answer.
type answer struct {
	Result    int             `json:"result"`
	Text      string          `json:"text"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// command sends one command to Kea's unix control socket and returns the answer's arguments.
// A non-zero result is an error wrapping ErrKeaRefused with Kea's text.
func command(ctx context.Context, socket, name string, timeout time.Duration) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("connect to Kea control socket %s: %w (is kea-dhcp4 running with this control-socket?)", socket, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return nil, fmt.Errorf("set deadline on Kea control socket: %w", err)
		}
	}
	req, err := json.Marshal(map[string]string{"command": name})
	if err != nil {
		return nil, fmt.Errorf("encode Kea command %s: %w", name, err)
	}
	if _, err := conn.Write(req); err != nil {
		return nil, fmt.Errorf("send %s to Kea: %w", name, err)
	}
	raw, err := io.ReadAll(io.LimitReader(conn, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("read Kea's answer to %s: %w", name, err)
	}
	a, err := decodeAnswer(raw)
	if err != nil {
		return nil, fmt.Errorf("decode Kea's answer to %s: %w", name, err)
	}
	if a.Result != 0 {
		return nil, fmt.Errorf("%w: %s answered result %d: %s", ErrKeaRefused, name, a.Result, a.Text)
	}
	return a.Arguments, nil
}

// decodeAnswer reads kea-dhcp4's answer object from its control socket.
func decodeAnswer(raw []byte) (answer, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return answer{}, errors.New("empty answer")
	}
	var a answer
	err := json.Unmarshal(raw, &a)
	return a, err
}
