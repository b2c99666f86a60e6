package webhook

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/folly-infra/fleetd/netbox"
)

// payload is NetBox's default webhook body, in every shape from NetBox 4.3 to 4.7
// (send_webhook in NetBox's netbox/extras/webhooks.py, v4.3.0 to v4.7.0-beta1): `model` (≤ 4.4)
// or `object_type` (≥ 4.4); `username`/`request_id` (≤ 4.6) or `request` (≥ 4.6). Only what
// fleetd needs is decoded: a webhook is a hint to re-read the device, never a source of truth
// (docs/design.md §2).
type payload struct {
	Event      string          `json:"event"`
	Model      string          `json:"model"`
	ObjectType string          `json:"object_type"`
	Username   string          `json:"username"`
	RequestID  string          `json:"request_id"`
	Request    *requestInfo    `json:"request"`
	Data       json.RawMessage `json:"data"`
	Snapshots  *struct {
		Prechange  map[string]any `json:"prechange"`
		Postchange map[string]any `json:"postchange"`
	} `json:"snapshots"`
}

type requestInfo struct {
	ID   string `json:"id"`
	User string `json:"user"`
}

// objectRef is what fleetd reads of `data` to find the device an event is about.
type objectRef struct {
	ID                 int64  `json:"id"`
	Device             *idRef `json:"device"`
	AssignedObjectType string `json:"assigned_object_type"`
	AssignedObject     *struct {
		ID     int64  `json:"id"`
		Device *idRef `json:"device"`
	} `json:"assigned_object"`
}

type idRef struct {
	ID int64 `json:"id"`
}

// objectType normalises the payload's object type to "app.model".
func (p payload) objectType() string {
	if p.ObjectType != "" {
		return p.ObjectType
	}
	switch p.Model { // NetBox ≤ 4.4 sends the bare model name
	case "device":
		return "dcim.device"
	case "interface":
		return "dcim.interface"
	case "macaddress":
		return "dcim.macaddress"
	case "ipaddress":
		return "ipam.ipaddress"
	}
	return p.Model
}

// user is the NetBox user whose request caused the event, whatever the NetBox version.
func (p payload) user() string {
	if p.Request != nil && p.Request.User != "" {
		return p.Request.User
	}
	return p.Username
}

// requestID is NetBox's id of the request that caused the event.
func (p payload) requestID() string {
	if p.Request != nil && p.Request.ID != "" {
		return p.Request.ID
	}
	return p.RequestID
}

// deviceID finds the device the event concerns: the device itself, an interface's device, or the
// device of the interface a MAC or IP address is assigned to. 0 means none.
func (p payload) deviceID() (int64, error) {
	var ref objectRef
	if err := json.Unmarshal(p.Data, &ref); err != nil {
		return 0, fmt.Errorf("decode data of a %s event: %w", p.objectType(), err)
	}
	switch p.objectType() {
	case "dcim.device":
		return ref.ID, nil
	case "dcim.interface":
		if ref.Device != nil {
			return ref.Device.ID, nil
		}
	case "dcim.macaddress", "ipam.ipaddress":
		if ref.AssignedObjectType == "dcim.interface" && ref.AssignedObject != nil && ref.AssignedObject.Device != nil {
			return ref.AssignedObject.Device.ID, nil
		}
	}
	return 0, nil
}

// onlyOwnedChanged reports whether a device update changed nothing but what fleetd writes: its own
// custom fields and the status. Such an event, made by fleetd's own NetBox user, is the echo of
// fleetd's PATCH and needs no re-read (docs/design.md §2: "fleetd's own PATCHes come back as webhooks").
func (p payload) onlyOwnedChanged(owned map[string]bool) bool {
	if p.Snapshots == nil || p.Snapshots.Prechange == nil || p.Snapshots.Postchange == nil {
		return false
	}
	pre, post := p.Snapshots.Prechange, p.Snapshots.Postchange
	for k := range union(pre, post) {
		switch k {
		case "last_updated", "status":
			continue
		case "custom_fields":
			if !onlyKeysDiffer(asMap(pre[k]), asMap(post[k]), owned) {
				return false
			}
			continue
		}
		if !reflect.DeepEqual(pre[k], post[k]) {
			return false
		}
	}
	return true
}

// reservationFields are the device fields a Kea reservation is made of (kea.Plan: the name and
// the primary IPv4 address). A device's MACs belong to its interfaces and MAC addresses, and the
// address's value to its IP address object, whose own events say when they change.
var reservationFields = []string{"name", "primary_ip4"}

// leavesReservations reports whether the event is a device update whose snapshots show none of
// the reservation fields changed, such as an owner's desired_action: it needs no refresh of the
// Kea reservations, which reads the whole fleet from NetBox. Without both snapshots, each with
// every reservation field (NetBox's serialize_object writes them all), it cannot tell, and says
// false.
func (p payload) leavesReservations() bool {
	if p.objectType() != "dcim.device" || p.Event != "updated" || p.Snapshots == nil ||
		p.Snapshots.Prechange == nil || p.Snapshots.Postchange == nil {
		return false
	}
	for _, f := range reservationFields {
		pre, ok1 := p.Snapshots.Prechange[f]
		post, ok2 := p.Snapshots.Postchange[f]
		if !ok1 || !ok2 || !reflect.DeepEqual(pre, post) {
			return false
		}
	}
	return true
}

func onlyKeysDiffer(pre, post map[string]any, allowed map[string]bool) bool {
	for k := range union(pre, post) {
		if !allowed[k] && !reflect.DeepEqual(pre[k], post[k]) {
			return false
		}
	}
	return true
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func union(a, b map[string]any) map[string]bool {
	u := make(map[string]bool, len(a)+len(b))
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}

// ownedFields are the custom fields fleetd writes or clears (netbox.OwnedFields).
func ownedFields() map[string]bool {
	m := map[string]bool{}
	for _, f := range netbox.OwnedFields() {
		m[f] = true
	}
	return m
}
