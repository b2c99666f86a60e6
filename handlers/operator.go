package handlers

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
)

// stateNone is the view's state of a device that never carried a request (fleet_state empty in
// NetBox), so that no field of the view is an unexplained "" (docs/http.md "Operator routes").
const stateNone = "none"

// deviceJSON is the operator's view of a device.
type deviceJSON struct {
	ID       int64  `json:"id"`
	Name     string `json:"name"`
	Status   string `json:"status"`
	Address  string `json:"address,omitempty"`
	MAC      string `json:"mac,omitempty"`
	Declared struct {
		Class         string   `json:"class"`
		DiskSerial    string   `json:"disk_serial"`
		EKSHA256      []string `json:"ek_sha256"`
		TPM           string   `json:"tpm"`
		DesiredAction string   `json:"desired_action,omitempty"`
	} `json:"declared"`
	State    string        `json:"state"`
	Message  string        `json:"message,omitempty"`
	Request  string        `json:"request,omitempty"`
	Workflow *workflowJSON `json:"workflow,omitempty"`
	Certs    struct {
		LDevIDSerial string `json:"ldevid_serial,omitempty"`
		LAKSerial    string `json:"lak_serial,omitempty"`
		// The serials a renewal replaced, accepted until the node presents the new ones.
		LDevIDSerialPrevious string `json:"ldevid_serial_previous,omitempty"`
		LAKSerialPrevious    string `json:"lak_serial_previous,omitempty"`
		LDevIDNotAfter       string `json:"ldevid_not_after,omitempty"`
		LDevIDRenewAfter     string `json:"ldevid_renew_after,omitempty"`
		LAKNotAfter          string `json:"lak_not_after,omitempty"`
		LAKRenewAfter        string `json:"lak_renew_after,omitempty"`
	} `json:"certificates"`
	BootCheck struct {
		Outcome     string `json:"outcome,omitempty"`
		Last        string `json:"last,omitempty"`
		HasBaseline bool   `json:"has_baseline"`
		Missing     bool   `json:"missing"`
	} `json:"boot_check"`
	PendingConfig bool `json:"pending_config"`
	// Joining is the step a joining device waits for: its kubelet's CSR, or its Node Ready.
	Joining string `json:"joining,omitempty"`
	// QueuedAction is a request the owner made while the current one runs; it starts after it.
	QueuedAction string     `json:"queued_action,omitempty"`
	Trust        *trustJSON `json:"trust,omitempty"`
}

// trustJSON is fleetd's verdict on the fields it owns (docs/design.md §9, "Sealed fields"), shown
// when it does not vouch for them, or they carry no seal yet (before the upgrade's reconcile
// seals them): for values it does not vouch for the view's state, request and certificates are
// empty, and read holds the values NetBox has, which fleetd does not act on.
type trustJSON struct {
	Verdict    string    `json:"verdict"`
	Reason     string    `json:"reason"`
	Key        string    `json:"key,omitempty"` // the key id of the seal
	WrittenBy  string    `json:"written_by,omitempty"`
	WrittenAt  string    `json:"written_at,omitempty"`
	RestoresTo string    `json:"restores_to,omitempty"` // the time of fleetd's own write a repair puts back
	Read       *readJSON `json:"read,omitempty"`
}

// readJSON is what NetBox holds of the fields a verdict does not vouch for.
type readJSON struct {
	State        string `json:"state,omitempty"`
	Request      string `json:"request,omitempty"`
	LDevIDSerial string `json:"ldevid_serial,omitempty"`
	LAKSerial    string `json:"lak_serial,omitempty"`
}

// trustOf is the view's trust section: none for values fleetd sealed and wrote last.
func trustOf(t fleet.Trust) *trustJSON {
	if t.Verdict == fleet.VerdictTrusted || t.Verdict == "" {
		return nil
	}
	j := &trustJSON{Verdict: string(t.Verdict), Reason: t.Reason, Key: t.Seal.KeyID, WrittenBy: t.Writer, WrittenAt: timeOrEmpty(t.WrittenAt)}
	if t.Restore != nil {
		j.RestoresTo = timeOrEmpty(t.Restore.At)
	}
	if !t.Trusted() {
		j.Read = &readJSON{State: string(t.Read.State), Request: t.Read.Request, LDevIDSerial: t.Read.LDevIDSerial, LAKSerial: t.Read.LAKSerial}
	}
	return j
}

type workflowJSON struct {
	Name          string `json:"name"`
	Phase         string `json:"phase,omitempty"`
	CurrentAction string `json:"current_action,omitempty"`
	FailedAction  string `json:"failed_action,omitempty"`
	Message       string `json:"message,omitempty"`
	Error         string `json:"error,omitempty"`
}

func toJSON(v fleet.DeviceView) deviceJSON {
	var j deviceJSON
	j.ID, j.Name, j.Status = v.ID, v.Name, string(v.Status)
	if v.Address.IsValid() {
		j.Address = v.Address.String()
	}
	j.MAC = string(v.PrimaryMAC())
	j.Declared.Class, j.Declared.DiskSerial = v.Declared.Class, v.Declared.DiskSerial
	j.Declared.EKSHA256, j.Declared.TPM = v.Declared.EKHashes, string(v.Declared.TPM)
	if j.Declared.TPM == "" {
		j.Declared.TPM = "2.0" // NetBox's tpm left empty means 2.0 (docs/design.md §2)
	}
	j.Declared.DesiredAction = string(v.Declared.DesiredAction)
	j.State, j.Message, j.Request = string(v.Owned.State), v.Owned.Message, v.Owned.Request
	if j.State == "" {
		j.State = stateNone // fleet_state empty: the device never carried a request
	}
	if v.Owned.Workflow != "" {
		j.Workflow = &workflowJSON{Name: v.Owned.Workflow, Error: v.WorkflowError}
		if w := v.Workflow; w != nil {
			j.Workflow.Phase, j.Workflow.CurrentAction = string(w.Phase), w.CurrentAction
			j.Workflow.FailedAction, j.Workflow.Message = w.FailedAction, w.Message
		}
	}
	j.Certs.LDevIDSerial, j.Certs.LAKSerial = v.Owned.LDevIDSerial, v.Owned.LAKSerial
	j.Certs.LDevIDSerialPrevious, j.Certs.LAKSerialPrevious = v.Owned.LDevIDSerialPrevious, v.Owned.LAKSerialPrevious
	j.Certs.LDevIDNotAfter, j.Certs.LDevIDRenewAfter = timeOrEmpty(v.LDevID.NotAfter), timeOrEmpty(v.LDevID.RenewAfter)
	j.Certs.LAKNotAfter, j.Certs.LAKRenewAfter = timeOrEmpty(v.LAK.NotAfter), timeOrEmpty(v.LAK.RenewAfter)
	j.BootCheck.Outcome = string(v.Owned.BootCheck)
	if !v.Owned.LastBootCheck.IsZero() {
		j.BootCheck.Last = v.Owned.LastBootCheck.UTC().Format(time.RFC3339)
	}
	j.BootCheck.HasBaseline = v.Owned.BootBaseline != ""
	j.BootCheck.Missing = v.BootCheckMissing
	j.PendingConfig = v.PendingConfig
	j.Joining = v.Joining
	j.QueuedAction = string(v.Queued)
	j.Trust = trustOf(v.Trust)
	return j
}

// timeOrEmpty is t in RFC 3339 (UTC), or "" for the zero time.
func timeOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// operatorOnly checks the bearer token in constant time (docs/design.md §6: operator routes need a bearer
// token read from a file). Every wrong or missing token takes one of its source address's guesses
// (Deps.OperatorGuesses); an address with none left is answered 429 before its token is looked
// at, so that guessing is bounded however fast the guesser asks.
func (s *Server) operatorOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch ok, addr, wait := s.operator(r); {
		case ok:
			h(w, r)
		case wait > 0:
			rateLimited(w, addr, wait)
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="fleetd"`)
			writeJSON(w, http.StatusUnauthorized, api.Error{Code: "unauthorized",
				Message: "operator routes need Authorization: Bearer <the token in operator.token_file>"})
		}
	}
}

// operator reports whether r carries the operator token. When it does not, or the source
// address has no guess left, wait is how long the address must wait (0: answer 401).
func (s *Server) operator(r *http.Request) (ok bool, addr netip.Addr, wait time.Duration) {
	return s.bearer(r, s.deps.OperatorToken)
}

// bearer reports whether r carries token as its bearer token, compared in constant time. Every
// wrong or missing token takes one of the source address's guesses (Deps.OperatorGuesses, shared
// by every token); an address with none left is told how long to wait before its token is looked at.
func (s *Server) bearer(r *http.Request, token []byte) (ok bool, addr netip.Addr, wait time.Duration) {
	addr, err := peerAddr(r.RemoteAddr)
	now := time.Now()
	if err == nil {
		if out, wait := s.guesses.exhausted(addr, now); out {
			return false, addr, wait
		}
	}
	tok, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if bearer && len(token) > 0 && subtle.ConstantTimeCompare([]byte(tok), token) == 1 {
		return true, addr, 0
	}
	if err == nil {
		s.guesses.allow(addr, now)
	}
	return false, addr, 0
}

func (s *Server) listDevices(w http.ResponseWriter, r *http.Request) {
	views, err := s.deps.Views.ViewAll(r.Context())
	if err != nil {
		writeError(w, s.log(w), err)
		return
	}
	out := make([]deviceJSON, len(views))
	for i, v := range views {
		out[i] = toJSON(v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"devices": out})
}

func (s *Server) getDevice(w http.ResponseWriter, r *http.Request) {
	v, err := s.deps.Views.View(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		writeError(w, s.log(w), err)
		return
	}
	writeJSON(w, http.StatusOK, toJSON(v))
}

func (s *Server) reconcileDevice(w http.ResponseWriter, r *http.Request) {
	out, err := s.deps.Requests.ReconcileByName(r.Context(), mux.Vars(r)["name"])
	log := s.log(w)
	ev := log.Info()
	if err != nil {
		ev = log.Warn().Err(err)
	}
	ev.Str("trigger", "operator").EmbedObject(out).Msg("decision")
	if _, refused := fleet.AsRefusal(err); refused || errors.Is(err, fleet.ErrNetBoxUnavailable) { // NetBox unreadable or unwritable: 503
		writeError(w, log, err)
		return
	}
	body := map[string]string{"device": out.Device, "step": out.Step, "outcome": out.Result}
	if out.Detail != "" { // nothing to do has nothing to explain
		body["detail"] = out.Detail
	}
	if err != nil {
		body["error"] = err.Error()
	}
	writeJSON(w, http.StatusOK, body)
}
