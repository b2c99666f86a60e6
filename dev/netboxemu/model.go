package netboxemu

import (
	"cmp"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"
)

// The in-memory database: one struct per NetBox model the emulator serves, rows keyed by id.
// Everything is guarded by Emulator.mu.

type user struct {
	id       int
	username string
}

type token struct {
	id           int
	user         int
	version      int    // 1 or 2
	key          string // v2: the 12-character key after nbt_
	plaintext    string
	writeEnabled bool
}

// named is a site, role, manufacturer (organizational models with name and slug).
type named struct {
	id          int
	name, slug  string
	description string
	created     time.Time
	lastUpdated time.Time
}

type deviceType struct {
	named        // name is the model
	manufacturer int
}

type device struct {
	id          int
	name        string
	deviceType  int
	role        int
	site        int
	status      string
	serial      string
	assetTag    *string
	description string
	comments    string
	primaryIP4  int            // 0: none
	cf          map[string]any // custom_field_data: only keys ever assigned (NetBox 4.6.8)
	tags        []string
	created     time.Time
	lastUpdated time.Time
}

type iface struct {
	id          int
	device      int
	name        string
	typ         string
	enabled     bool
	mgmtOnly    bool
	primaryMAC  int // 0: none
	description string
	created     time.Time
	lastUpdated time.Time
}

type macAddr struct {
	id          int
	mac         string // uppercase, colon-separated, as NetBox renders it
	iface       int    // assigned dcim.interface, 0: unassigned
	description string
	created     time.Time
	lastUpdated time.Time
}

type ipAddr struct {
	id          int
	address     netip.Prefix
	status      string
	iface       int // assigned dcim.interface, 0: unassigned
	dnsName     string
	description string
	created     time.Time
	lastUpdated time.Time
}

type journalEntry struct {
	id          int
	objType     string
	objID       int
	created     time.Time
	createdBy   int
	kind        string
	comments    string
	lastUpdated time.Time
}

type choiceSet struct {
	id          int
	name        string
	description string
	choices     [][2]string
	created     time.Time
	lastUpdated time.Time
}

type customField struct {
	id              int
	name, label     string
	typ             string
	objectTypes     []string
	choiceSet       int // 0: none
	groupName       string
	weight          int
	description     string
	required        bool
	def             any
	uiVisible       string
	uiEditable      string
	filterLogic     string // disabled, loose (NetBox's default) or exact
	searchWeight    int
	validationRegex string
	created         time.Time
	lastUpdated     time.Time
}

type webhook struct {
	id                int
	name, description string
	payloadURL        string
	httpMethod        string
	contentType       string
	additionalHeaders string
	secret            string
	sslVerification   bool
	created           time.Time
	lastUpdated       time.Time
}

type eventRule struct {
	id          int
	name        string
	description string
	objectTypes []string
	eventTypes  []string
	enabled     bool
	conditions  any      // decoded JSON as stored (nil: none)
	cond        *condSet // parsed conditions (nil: always)
	webhook     int
	created     time.Time
	lastUpdated time.Time
}

// db holds every table and the id sequences.
type db struct {
	seq          map[string]int
	users        map[int]*user
	tokens       map[int]*token
	sites        map[int]*named
	roles        map[int]*named
	mfrs         map[int]*named
	deviceTypes  map[int]*deviceType
	devices      map[int]*device
	ifaces       map[int]*iface
	macs         map[int]*macAddr
	ips          map[int]*ipAddr
	journal      map[int]*journalEntry
	choiceSets   map[int]*choiceSet
	customFields map[int]*customField
	webhooks     map[int]*webhook
	eventRules   map[int]*eventRule
}

func newDB() *db {
	return &db{seq: map[string]int{}, users: map[int]*user{}, tokens: map[int]*token{},
		sites: map[int]*named{}, roles: map[int]*named{}, mfrs: map[int]*named{},
		deviceTypes: map[int]*deviceType{}, devices: map[int]*device{}, ifaces: map[int]*iface{},
		macs: map[int]*macAddr{}, ips: map[int]*ipAddr{}, journal: map[int]*journalEntry{},
		choiceSets: map[int]*choiceSet{}, customFields: map[int]*customField{},
		webhooks: map[int]*webhook{}, eventRules: map[int]*eventRule{}}
}

// next returns the next primary key of a table (ids start at 1 and are never reused).
func (d *db) next(table string) int {
	d.seq[table]++
	return d.seq[table]
}

// matchingIDs returns the keys of the rows of a table that keep accepts, ordered as sortedIDs
// orders them: filtering before sorting keeps a filtered list of a large table (one device's
// interfaces among thousands) linear in the table's size.
func matchingIDs[T any](m map[int]T, keep func(T) bool, less func(a, b T) bool) []int {
	return sortedKept(m, less, func(id int) bool { return keep(m[id]) })
}

// byID orders rows by id alone (sortedIDs breaks ties by id).
func byID[T any](a, b T) bool { return false }

// sortedIDs returns the keys of a table ordered by less (the model's Meta.ordering).
func sortedIDs[T any](m map[int]T, less func(a, b T) bool) []int { return sortedKept(m, less, nil) }

// sortedKept returns the keys of the rows keep accepts (every row when keep is nil), ordered as
// sortedIDs orders them: filtering before sorting keeps a filtered list of a large table (one
// device's interfaces among thousands) linear in the table's size.
func sortedKept[T any](m map[int]T, less func(a, b T) bool, keep func(id int) bool) []int {
	// The rows are sorted with their values beside their ids: looking each up in m at every
	// comparison was a quarter of a 10,000-device listing's time.
	type row struct {
		id int
		v  T
	}
	var rows []row
	for id, v := range m {
		if keep == nil || keep(id) {
			rows = append(rows, row{id, v})
		}
	}
	slices.SortFunc(rows, func(a, b row) int {
		switch {
		case less(a.v, b.v):
			return -1
		case less(b.v, a.v):
			return 1
		}
		return cmp.Compare(a.id, b.id)
	})
	if len(rows) == 0 {
		return nil
	}
	ids := make([]int, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	return ids
}

// deviceCFs returns the custom fields defined for an object type, in NetBox's order
// (group_name, weight, name).
func (d *db) cfsFor(objectType string) []*customField {
	var out []*customField
	for _, cf := range d.customFields {
		for _, ot := range cf.objectTypes {
			if ot == objectType {
				out = append(out, cf)
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.groupName != b.groupName {
			return a.groupName < b.groupName
		}
		if a.weight != b.weight {
			return a.weight < b.weight
		}
		return a.name < b.name
	})
	return out
}

func (d *db) userByName(name string) *user {
	for _, u := range d.users {
		if u.username == name {
			return u
		}
	}
	return nil
}

func (d *db) deviceByName(name string) *device {
	for _, dev := range d.devices {
		if dev.name == name {
			return dev
		}
	}
	return nil
}

// slugify makes a NetBox-style slug from a name.
func slugify(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}
