package handlers

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
)

// inventory answers the inventory check of every fleet device, or of each ?device=; it writes
// nothing.
func (s *Server) inventory(w http.ResponseWriter, r *http.Request) {
	s.answerInventory(w, r, r.URL.Query()["device"])
}

// deviceInventory answers the inventory check of one device.
func (s *Server) deviceInventory(w http.ResponseWriter, r *http.Request) {
	s.answerInventory(w, r, []string{mux.Vars(r)["name"]})
}

func (s *Server) answerInventory(w http.ResponseWriter, r *http.Request, names []string) {
	rep, err := s.deps.Review.InventoryCheck(r.Context(), names)
	if err != nil {
		writeError(w, s.log(w), err)
		return
	}
	writeJSON(w, http.StatusOK, inventoryJSON(rep))
}

func inventoryJSON(r fleet.InventoryReport) api.Inventory {
	j := api.Inventory{CheckedAt: r.CheckedAt, BootCheckWindow: r.BootCheckWindow.String(), Devices: []api.InventoryDevice{}}
	for _, d := range r.Devices {
		dj := api.InventoryDevice{Device: d.Device, Class: d.Class, Result: string(d.Result)}
		if !d.DeclaredAt.IsZero() {
			at := d.DeclaredAt
			dj.DeclaredAt = &at
		}
		for _, diff := range d.Differences {
			dj.Differences = append(dj.Differences, api.InventoryDifference{Kind: string(diff.Kind), Detail: diff.Detail, At: diff.At, Source: diff.Source})
		}
		for _, st := range d.Stale {
			dj.Stale = append(dj.Stale, api.InventoryStale{Facts: st.Half, Seen: st.Seen, DeclaredAt: st.DeclaredAt, By: st.By})
		}
		j.Differences += len(d.Differences)
		j.Devices = append(j.Devices, dj)
	}
	return j
}
