package chaos

import (
	"math/rand/v2"
	"net/http"
	"time"
)

// Role is what a machine of the pool is for.
type Role int

const (
	// RoleNode is a validly declared machine whose EK is approved: it walks the whole lifecycle.
	RoleNode Role = iota
	// RoleRefused is a machine whose declaration looks valid but whose enrollment fleetd must
	// refuse (its EK is not the approved one, or two disks carry the declared serial): nothing
	// may be issued to it or wiped on it.
	RoleRefused
	// RoleRejected is a machine whose declaration fleetd refuses before anything runs (no
	// approved EK at all).
	RoleRejected
)

// PoolMachine is one machine schedules may act on.
type PoolMachine struct {
	Name string
	Role Role
}

// Config says what Generate draws from.
type Config struct {
	Pool []PoolMachine
	// Machines is how many machines one schedule acts on (default 3), at least one a RoleNode.
	Machines int
	// NetBoxTimeout is fleetd's netbox.timeout: a "timeout" fault delays NetBox's answer past it.
	NetBoxTimeout time.Duration
}

// Generate draws the schedule of a seed: a few machines' scripts of owner requests and machine
// steps, interleaved, with fault episodes between them. The same seed and Config give the same
// schedule.
func Generate(seed int64, cfg Config) Schedule {
	if cfg.Machines <= 0 {
		cfg.Machines = 3
	}
	g := &generator{rng: rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15)), cfg: cfg}
	var scripts [][]Step
	for _, m := range g.machines() {
		scripts = append(scripts, g.script(m))
	}
	steps := g.interleave(scripts)
	for range 1 + g.rng.IntN(3) {
		steps = g.insertFault(steps)
	}
	for range 1 + g.rng.IntN(2) {
		steps = g.insertStaleWrite(steps)
	}
	if g.chance(0.5) {
		steps = g.insertForgedWrite(steps)
	}
	return Schedule{Seed: seed, Steps: steps}
}

type generator struct {
	rng *rand.Rand
	cfg Config
}

// chance is true with probability p.
func (g *generator) chance(p float64) bool { return g.rng.Float64() < p }

// machines picks the schedule's machines: one or more nodes, and sometimes a machine that must
// be refused or rejected.
func (g *generator) machines() []PoolMachine {
	var nodes, others []PoolMachine
	for _, m := range g.cfg.Pool {
		if m.Role == RoleNode {
			nodes = append(nodes, m)
		} else {
			others = append(others, m)
		}
	}
	g.rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	g.rng.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	n := min(g.cfg.Machines, len(nodes)+len(others))
	var out []PoolMachine
	if len(others) > 0 && g.chance(0.6) {
		out = append(out, others[0])
	}
	for _, m := range nodes {
		if len(out) >= n {
			break
		}
		out = append(out, m)
	}
	return out
}

// script is one machine's steps: a first provision, then a few more requests as an owner would
// make them, each followed by what the machine does.
func (g *generator) script(m PoolMachine) []Step {
	if m.Role != RoleNode {
		return g.refusedScript(m)
	}
	// Every script starts from a device the owner declares installable again (status planned),
	// whatever an earlier schedule left, then provisions it.
	steps := []Step{{Kind: Redeclare, Machine: m.Name}}
	steps = append(steps, g.provision(m.Name)...)
	installed := true
	for range g.rng.IntN(3) {
		var more []Step
		switch r := g.rng.Float64(); {
		case r < 0.25 && installed:
			more = []Step{{Kind: BootCheck, Machine: m.Name}}
			if g.chance(0.5) {
				more = append(more, g.renew(m.Name))
			}
		case r < 0.45:
			more = []Step{{Kind: Ask, Machine: m.Name, Arg: "attest"}, g.netboot(m.Name)}
		case r < 0.65:
			more, installed = []Step{{Kind: Ask, Machine: m.Name, Arg: "wipe"}, g.netboot(m.Name)}, false
		case r < 0.8:
			more, installed = []Step{{Kind: Decommission, Machine: m.Name}, g.netboot(m.Name)}, false
			if g.chance(0.5) {
				more = append(more, Step{Kind: Redeclare, Machine: m.Name})
			}
		default:
			more, installed = g.provision(m.Name), true
		}
		steps = append(steps, more...)
	}
	return steps
}

// provision is a provision request and what follows it: usually the machine netboots, boots and
// checks its boot; sometimes fleetd is killed on the way, or Tinkerbell ends the Workflow without
// running it, or the machine stays off (Settle then plays it).
func (g *generator) provision(name string) []Step {
	ask := Step{Kind: Ask, Machine: name, Arg: "provision"}
	if g.chance(0.15) {
		ask.Kill = KillAfterClaim
	}
	steps := []Step{ask}
	switch r := g.rng.Float64(); {
	case r < 0.08:
		return append(steps, Step{Kind: Workflow, Machine: name, Arg: "fail"})
	case r < 0.12:
		return append(steps, Step{Kind: Workflow, Machine: name, Arg: "succeed"})
	case r < 0.16:
		return steps
	}
	steps = append(steps, g.netboot(name))
	if g.chance(0.15) { // between the attestation and the configuration's fetch
		steps = append(steps, Step{Kind: KillFleetd})
	}
	steps = append(steps, Step{Kind: Boot, Machine: name})
	if g.chance(0.5) {
		steps = append(steps, Step{Kind: BootCheck, Machine: name})
	}
	if g.chance(0.5) {
		steps = append(steps, g.renew(name))
	}
	return steps
}

// renew is the node's check once its certificates are due (Runner.renew): uncut, or cut after
// fleetd recorded the renewal, by the node going down before the answer reaches it or by
// fleetd killed before it answers.
func (g *generator) renew(name string) Step {
	s := Step{Kind: Renew, Machine: name}
	switch r := g.rng.Float64(); {
	case r < 0.35:
		s.Arg = RenewAnswerLost
	case r < 0.7:
		s.Kill = KillMidRenewal
	}
	return s
}

// netboot is a netboot, sometimes with fleetd killed while the agent enrolls.
func (g *generator) netboot(name string) Step {
	s := Step{Kind: Netboot, Machine: name}
	if g.chance(0.15) {
		// The agent's exchange takes a few hundred milliseconds on the stack's swtpm.
		s.Kill, s.Delay = KillDuringEnroll, time.Duration(g.rng.IntN(400))*time.Millisecond
	}
	return s
}

// refusedScript is what the owner tries with a machine fleetd must refuse: a provision, or a
// wipe, and its netboot.
func (g *generator) refusedScript(m PoolMachine) []Step {
	action := "provision"
	if g.chance(0.3) {
		action = "wipe"
	}
	return []Step{{Kind: Redeclare, Machine: m.Name}, {Kind: Ask, Machine: m.Name, Arg: action}, g.netboot(m.Name)}
}

// interleave merges the machines' scripts in a random order that keeps each script's order.
func (g *generator) interleave(scripts [][]Step) []Step {
	var out []Step
	for {
		var open []int
		for i, s := range scripts {
			if len(s) > 0 {
				open = append(open, i)
			}
		}
		if len(open) == 0 {
			return out
		}
		i := open[g.rng.IntN(len(open))]
		out = append(out, scripts[i][0])
		scripts[i] = scripts[i][1:]
	}
}

// insertFault puts one fault episode at a random place, over one to four steps: a NetBox fault
// healed after them, the API server stopped and started again after them, or fleetd killed.
func (g *generator) insertFault(steps []Step) []Step {
	switch r := g.rng.Float64(); {
	case r < 0.5:
		return g.insertNetBoxFault(steps)
	case r < 0.75:
		at := g.rng.IntN(len(steps))
		end := min(at+1+g.rng.IntN(4), len(steps))
		steps = insert(steps, end, Step{Kind: KubeStart})
		return insert(steps, at, Step{Kind: KubeStop})
	}
	return insert(steps, g.rng.IntN(len(steps)+1), Step{Kind: KillFleetd})
}

// insertNetBoxFault puts a NetBox fault episode over one to four steps, outside every other
// NetBox episode (two rules counting the same requests at once let the first shadow the second,
// which then faults nothing), and starting at an owner's request when only what one sets off can
// meet the fault: a webhook's delivery, the PATCH or the POST (fleetd's journal entry for its
// decision) a method-bound 5xx waits for. A redeclare is no such request: a device planned
// already saves nothing, and no webhook fires for planned. A schedule with no such place gets
// none.
func (g *generator) insertNetBoxFault(steps []Step) []Step {
	f := g.netboxFault()
	span := 1 + g.rng.IntN(4)
	var starts []int
	open := false // a NetBox episode is open before steps[i]
	for i, s := range steps {
		if !open && s.Kind != NetBoxFault && (!needsOwner(f) || isRequest(s)) {
			starts = append(starts, i)
		}
		switch s.Kind {
		case NetBoxFault:
			open = true
		case NetBoxHeal:
			open = false
		}
	}
	if len(starts) == 0 {
		return steps
	}
	at := starts[g.rng.IntN(len(starts))]
	end := at + 1
	for end < len(steps) && end < at+span && steps[end].Kind != NetBoxFault {
		end++
	}
	steps = insert(steps, end, Step{Kind: NetBoxHeal})
	return insert(steps, at, f)
}

// needsOwner reports whether only an owner's request sets off what the fault waits for.
func needsOwner(f Step) bool {
	return f.Arg == "drop-webhooks" || f.Arg == "late-webhooks" || (f.Arg == "5xx" && (f.Method == http.MethodPatch || f.Method == http.MethodPost))
}

// isRequest reports whether the step is an owner's request, which fires a webhook.
func isRequest(s Step) bool { return s.Kind == Ask || s.Kind == Decommission }

// netboxFault draws one NetBox fault.
func (g *generator) netboxFault() Step {
	timeout := g.cfg.NetBoxTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	switch g.rng.IntN(5) {
	case 0:
		methods := []string{"", http.MethodGet, http.MethodPatch, http.MethodPost}
		statuses := []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable}
		return Step{Kind: NetBoxFault, Arg: "5xx", Status: statuses[g.rng.IntN(len(statuses))],
			Method: methods[g.rng.IntN(len(methods))], N: 2 + g.rng.IntN(12)}
	case 1:
		return Step{Kind: NetBoxFault, Arg: "slow", N: 5 + g.rng.IntN(40), Delay: time.Duration(100+g.rng.IntN(700)) * time.Millisecond}
	case 2:
		return Step{Kind: NetBoxFault, Arg: "timeout", N: 1 + g.rng.IntN(3), Delay: timeout + 500*time.Millisecond}
	case 3:
		return Step{Kind: NetBoxFault, Arg: "drop-webhooks", N: 1 + g.rng.IntN(4)}
	}
	return Step{Kind: NetBoxFault, Arg: "late-webhooks", N: 1 + g.rng.IntN(4), Delay: time.Duration(500+g.rng.IntN(2500)) * time.Millisecond}
}

// insertStaleWrite puts an owner's stale write of a machine's device one to three steps after
// one of that machine's steps, saving the copy read just before that step (or one step earlier):
// whatever the step made fleetd write (a claim, an attestation, a delivery, a boot check, a
// failure) is what the copy writes back, at any point of the machine's lifecycle.
func (g *generator) insertStaleWrite(steps []Step) []Step {
	var at []int
	for i, s := range steps {
		if s.Machine != "" && s.Kind != StaleWrite {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return steps
	}
	j := at[g.rng.IntN(len(at))]
	k := min(j+1+g.rng.IntN(3), len(steps))
	s := Step{Kind: StaleWrite, Machine: steps[j].Machine, Arg: staleChanges[g.rng.IntN(len(staleChanges))], N: k - j + g.rng.IntN(2)}
	return insert(steps, k, s)
}

func insert(steps []Step, at int, s Step) []Step {
	steps = append(steps, Step{})
	copy(steps[at+1:], steps[at:])
	steps[at] = s
	return steps
}

// insertForgedWrite puts a forged editor write of a machine's device one to three steps after one
// of that machine's steps: the editor saves values fleetd wrote earlier in the device's life
// (before a wipe, its identity; before a delivery, its pending state), then the current ones.
func (g *generator) insertForgedWrite(steps []Step) []Step {
	var at []int
	for i, s := range steps {
		if s.Machine != "" && s.Kind != StaleWrite && s.Kind != ForgedWrite {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return steps
	}
	j := at[g.rng.IntN(len(at))]
	return insert(steps, min(j+1+g.rng.IntN(3), len(steps)), Step{Kind: ForgedWrite, Machine: steps[j].Machine})
}
