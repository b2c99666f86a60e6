package fleet

import (
	"encoding/json"
	"sort"
	"time"
)

// Kind is how a class's operating system receives its configuration (docs/design.md §1 step 6).
type Kind string

const (
	KindTalos     Kind = "talos"
	KindNixOS     Kind = "nixos-image"
	KindAlpine    Kind = "alpine-image"
	KindCloudInit Kind = "cloud-init-nocloud"
)

// Route is the configuration route a node of the kind fetches from (docs/design.md §6): "talos", "seed"
// (nixos-image and alpine-image share one seed format) or "nocloud.tar".
func (k Kind) Route() string {
	switch k {
	case KindTalos:
		return "talos"
	case KindNixOS, KindAlpine:
		return "seed"
	case KindCloudInit:
		return "nocloud.tar"
	}
	return string(k)
}

// Kinds lists every class kind.
var Kinds = []Kind{KindTalos, KindNixOS, KindAlpine, KindCloudInit}

// SecureBoot is a class's Secure Boot policy, applied to the state extracted from the verified
// event log at enrollment and at every boot check.
type SecureBoot string

const (
	SecureBootRequired SecureBoot = "required" // the verified log must show Secure Boot enabled
	SecureBootAny      SecureBoot = "any"      // recorded, not enforced
)

// Class is one entry of classes.json: what a device of the class runs and how it is installed.
type Class struct {
	Name        string
	Kind        Kind
	Installable bool
	Reason      string            // why the class cannot be installed, when it cannot
	Templates   map[Action]string // Tinkerbell Template per action
	Image       string            // the OS image URL the install Template writes
	Profile     string            // the profile a nixos-image or alpine-image node switches into
	SecureBoot  SecureBoot
	Netboot     Netboot
	Timeout     time.Duration // the Workflow's global timeout
	// JoinsKubernetes: a node of the class joins the workload cluster, so its install is done
	// only when its Node is Ready (docs/design.md §1, "Joining the cluster"): delivery moves it to
	// joining, not active, and its configuration carries a bootstrap token of its own. Only
	// talos classes join (their default); the other kinds go active at delivery.
	JoinsKubernetes bool
	Talos           *TalosClass
	CloudInit       *CloudInitClass
}

// Netboot is how Tinkerbell boots the machine into HookOS for a Workflow (Workflow bootOptions).
type Netboot struct {
	ToggleAllowNetboot bool
	BootMode           string // "", "netboot" (needs a BMC on the Hardware) or "iso"
	ISOURL             string
}

// TalosClass holds what a talos class adds to the generated machine config.
type TalosClass struct {
	MachineType string            // "controlplane" or "worker"
	Patches     []json.RawMessage // strategic-merge patches, applied in order before the node's own
}

// CloudInitClass holds the NoCloud user-data of a cloud-init-nocloud class.
type CloudInitClass struct {
	UserData string
}

// Catalog is the validated content of classes.json.
type Catalog struct {
	classes map[string]Class
}

// Class returns the named class.
func (c Catalog) Class(name string) (Class, bool) {
	cl, ok := c.classes[name]
	return cl, ok
}

// Names returns the class names, sorted.
func (c Catalog) Names() []string {
	names := make([]string, 0, len(c.classes))
	for n := range c.classes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewCatalog builds a catalog from already-validated classes (for tests and the dev stack).
func NewCatalog(classes ...Class) Catalog {
	m := make(map[string]Class, len(classes))
	for _, c := range classes {
		m[c.Name] = c
	}
	return Catalog{classes: m}
}
