package agent

import (
	"errors"
	"fmt"
)

// Exit codes of `fleetd enroll` and `fleetd boot-check`. A Workflow action fails on any non-zero
// code; the codes tell an operator reading the action's or the timer's status where to look.
const (
	ExitOK      = 0 // enrolled: the files are written; boot check: recorded ok
	ExitFailure = 1 // the machine failed otherwise (writing the workflow directory, reading sysfs or lak.pem)
	ExitUsage   = 2 // the flags or environment are wrong (no fleetd URL, no device name, no lak.pem)
	ExitRefused = 3 // fleetd refused the machine (a 4xx): its message says why
	ExitFleetd  = 4 // fleetd could not be reached or failed (connection error, timeout, 5xx after retries)
	ExitTPM     = 5 // the TPM could not be opened or a TPM command failed
	ExitDrift   = 6 // boot check only: accepted and recorded as drift (the boot differs from the baseline)
	// ExitNotRenewed (7, renew.go): boot check only: accepted as ok, but a due certificate was not renewed.
)

// ExitCode maps an error of Enroll or BootCheck to the process exit code.
func ExitCode(err error) int {
	var (
		usage   *UsageError
		refused *RefusedError
		fleetd  *FleetdError
		tpm     *TPMError
		drift   *DriftError
		renew   *NotRenewedError
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &usage):
		return ExitUsage
	case errors.As(err, &refused):
		return ExitRefused
	case errors.As(err, &fleetd):
		return ExitFleetd
	case errors.As(err, &tpm):
		return ExitTPM
	case errors.As(err, &drift):
		return ExitDrift
	case errors.As(err, &renew):
		return ExitNotRenewed
	default:
		return ExitFailure
	}
}

// UsageError is a configuration mistake; nothing was attempted.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return "usage: " + e.Msg }

// RefusedError is fleetd's refusal: a 4xx with its error code and message (docs/design.md §6).
type RefusedError struct {
	Status  int
	Code    string
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("fleetd refused (%d %s): %s", e.Status, e.Code, e.Message)
}

// FleetdError is a failure to get an answer from fleetd: the network, a timeout, a 5xx after the
// retries, or an answer that is not what the contract says.
type FleetdError struct {
	Op  string
	Err error
}

func (e *FleetdError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *FleetdError) Unwrap() error { return e.Err }

// TPMError is a failure of the machine's TPM or of the connection to it.
type TPMError struct {
	Op  string
	Err error
}

func (e *TPMError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *TPMError) Unwrap() error { return e.Err }
