package chaos

import (
	"context"
	"slices"
)

// What a step did is counted by coverage key: a kind and the variant drawn ("ask provision",
// "netbox-fault timeout", "boot"), and a kill point riding on a step ("kill-fleetd after-claim").
// The table below is the one list of them: the Runner plays a step through its kind's entry,
// Keys is every key the table names, TestGenerateShape fails when 500 seeds never draw one,
// and the covering run of `make test` (CoveringSeeds) plays seeds that draw every one and fails
// unless each happened. A new kind of step is one entry here and a rule in the generator.

// Outcome is what became of one thing a step set out to do.
type Outcome int

const (
	// Happened: it did what it says (the owner's PATCH is in NetBox, the machine ran its
	// Workflow, fleetd was killed and started again, the fault hit a request or a delivery).
	Happened Outcome = iota
	// Idle: there was nothing for it to act on (no Workflow waited, nothing was installed, no
	// request met the fault): nothing broke, and nothing happened.
	Idle
	// Failed: it was tried and broke, as steps do under faults (Event.Err says how).
	Failed
)

func (o Outcome) String() string {
	return [...]string{"happened", "idle", "failed"}[o]
}

// Event is one thing a step made happen, or tried to.
type Event struct {
	Key     string
	Outcome Outcome
	Err     error // Failed: what broke; Idle: why there was nothing to do
	Must    bool  // the world's own lever: a schedule in which it did not happen fails (kind.must)
	Hits    int   // a NetBox fault: the requests or deliveries it faulted

	fired func() int // a NetBox fault not yet resolved (Runner.resolveFaults)
}

// kind is how one Kind of step is drawn, played and counted.
type kind struct {
	kind Kind
	// variants are the Args a schedule draws ({""}: the kind has none), each a key of its own.
	variants []string
	// must: the step is a lever of the world's own (the owner's PATCH, a fault, the API server,
	// a SIGKILL): a schedule in which it did not happen did not play what it says, and fails.
	// The machines' steps and Tinkerbell's depend on what fleetd did before; they may find
	// nothing to act on, or fail under the faults, and are counted, not required.
	must bool
	// play plays the step and says what it did: the first event is the step's own.
	play func(r *Runner, ctx context.Context, s Step) []Event
}

// kinds is every kind of step a schedule has (schedule.go names them).
var kinds = []kind{
	{kind: Ask, variants: []string{"provision", "attest", "wipe"}, must: true, play: (*Runner).ask},
	{kind: Decommission, variants: []string{""}, must: true, play: (*Runner).ask},
	{kind: Redeclare, variants: []string{""}, must: true, play: (*Runner).ask},
	// A stale write happened when it wrote back a value of a field fleetd owns that fleetd had
	// changed since the copy was read; a copy that still held fleetd's values is idle.
	{kind: StaleWrite, variants: staleChanges, play: (*Runner).staleWrite},
	// A forged editor write happened when its first save wrote back values of fleetd's fields
	// fleetd had changed since; a device whose every save of fleetd's holds its values now is idle.
	{kind: ForgedWrite, variants: []string{""}, play: (*Runner).forgedWrite},
	{kind: Netboot, variants: []string{""}, play: (*Runner).netboot},
	{kind: Boot, variants: []string{""}, play: (*Runner).boot},
	{kind: BootCheck, variants: []string{""}, play: (*Runner).bootCheck},
	{kind: Renew, variants: []string{"", RenewAnswerLost}, play: (*Runner).renew},
	{kind: Workflow, variants: []string{"succeed", "fail"}, play: (*Runner).workflow},
	{kind: NetBoxFault, variants: netboxFaults, must: true, play: (*Runner).netboxFault},
	{kind: NetBoxHeal, variants: []string{""}, must: true, play: (*Runner).netboxHeal},
	{kind: KubeStop, variants: []string{""}, must: true, play: (*Runner).kubeStop},
	{kind: KubeStart, variants: []string{""}, must: true, play: (*Runner).kubeStart},
	{kind: KillFleetd, variants: []string{""}, must: true, play: (*Runner).kill},
}

// staleChanges are StaleWrite's variants: the one key the owner's client changed on its copy.
var staleChanges = []string{"desired-action", "owner-field"}

// netboxFaults are NetBoxFault's variants (Runner.netboxFault installs each).
var netboxFaults = []string{"5xx", "slow", "timeout", "drop-webhooks", "late-webhooks"}

// killPoints are the kill points that ride on a step (Step.Kill), and the kind each rides on.
// A kill point waits for a moment fleetd may never reach (a claim, an enrollment), so it is
// counted, not required; the covering run requires each to have happened once.
var killPoints = []struct {
	point string
	on    Kind
}{{KillAfterClaim, Ask}, {KillDuringEnroll, Netboot}, {KillMidRenewal, Renew}}

// coverWeight is how many times more often than the others the covering run draws a key whose
// happening depends on more than one thing going right: a renewal needs the node installed and
// active at its step, and a cut one the cut landing after fleetd's NetBox write.
var coverWeight = map[string]int{
	key(Renew, ""): 2, key(Renew, RenewAnswerLost): 2, killKey(KillMidRenewal): 2,
}

func kindOf(k Kind) (kind, bool) {
	i := slices.IndexFunc(kinds, func(x kind) bool { return x.kind == k })
	if i < 0 {
		return kind{}, false
	}
	return kinds[i], true
}

// key is the coverage key of a kind and a variant.
func key(k Kind, arg string) string {
	if arg == "" {
		return string(k)
	}
	return string(k) + " " + arg
}

func killKey(point string) string { return key(KillFleetd, point) }

// Keys is every coverage key, in the table's order: each kind's variants, then the kill points.
func Keys() []string {
	var out []string
	for _, k := range kinds {
		for _, v := range k.variants {
			out = append(out, key(k.kind, v))
		}
	}
	for _, p := range killPoints {
		out = append(out, killKey(p.point))
	}
	return out
}

// Keys are the coverage keys the step draws: its own, and its kill point's.
func (s Step) Keys() []string {
	out := []string{key(s.Kind, s.Arg)}
	if s.Kill != "" {
		out = append(out, killKey(s.Kill))
	}
	return out
}

// did is the event of something tried: Happened when err is nil, else Failed.
func did(key string, err error) Event {
	if err != nil {
		return Event{Key: key, Outcome: Failed, Err: err}
	}
	return Event{Key: key, Outcome: Happened}
}

// idle is the event of something that found nothing to act on.
func idle(key string, why error) Event { return Event{Key: key, Outcome: Idle, Err: why} }
