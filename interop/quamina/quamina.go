// Package quamina stands in for quamina.net/go/quamina, which the Go module proxy does not serve,
// in the one module that builds Tinkerbell v0.25's binaries (interop/tinkerbell replaces the
// module with this directory; fleetd's own module never requires it). Tinkerbell imports quamina
// in two places only, neither on fleetd's path: the controller's allow and deny rules for a
// Hardware's spec.references, and the server's auto-enrollment WorkflowRuleSets. Here every
// pattern is refused with an error, and every call writes Reached to standard error, which is
// the process's log: the development stack's tests read those logs and fail if any flow of
// fleetd's reached this module (docs/design.md, "Development stack").
package quamina

import (
	"fmt"
	"os"
)

// Reached begins the line each call writes to standard error, and every error it returns.
const Reached = "quamina replacement reached"

// X is a pattern's identifier, as in quamina.
type X = any

// Option is an option of New; none is accepted.
type Option func(*Quamina) error

// Quamina matches nothing: it refuses every pattern.
type Quamina struct{}

// New returns a matcher that refuses every pattern (it never fails, as Tinkerbell's server
// assumes when it ignores New's error).
func New(...Option) (*Quamina, error) {
	reached("New")
	return &Quamina{}, nil
}

// AddPattern refuses the pattern.
func (*Quamina) AddPattern(x X, pattern string) error {
	reached("AddPattern")
	return fmt.Errorf("%s: pattern %v (%s) refused: pattern matching is not built into this Tinkerbell (the module proxy does not serve quamina.net/go/quamina)", Reached, x, pattern)
}

// MatchesForEvent matches nothing and says why.
func (*Quamina) MatchesForEvent([]byte) ([]X, error) {
	reached("MatchesForEvent")
	return nil, fmt.Errorf("%s: no pattern can be matched in this Tinkerbell (the module proxy does not serve quamina.net/go/quamina)", Reached)
}

func reached(call string) {
	fmt.Fprintf(os.Stderr, "%s: %s called\n", Reached, call)
}
