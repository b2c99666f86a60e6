package handlers

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/folly-infra/fleetd/api"
	"github.com/folly-infra/fleetd/fleet"
)

// config serves GET /v1/config/{talos,seed,nocloud.tar}: the node's configuration, once, to the
// machine that attested with the query's SMBIOS UUID, only from its NetBox address, and with the
// fetch secret its attestation handed out in the Fleetd-Fetch-Secret header, or, for Talos, which
// sends no header of its own, in the query's code (Talos fills ${code} from its META, where the
// install wrote the secret) (docs/design.md §6). The query is not logged.
// The source address is the TCP peer's; fleetd serves nodes directly, so no forwarding header is
// trusted.
func (s *Server) config(kind fleet.Kind) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		out := fleet.Outcome{Step: "deliver", Result: "refused"}
		remote, err := peerAddr(r.RemoteAddr)
		if err != nil {
			s.nodeError(w, out, fleet.Refuse(fleet.RefusedInvalid, "bad_peer", "fleetd cannot read the request's source address"))
			return
		}
		secret := r.Header.Get(api.HeaderFetchSecret)
		if kind == fleet.KindTalos && secret == "" {
			secret = q.Get("code")
		}
		f := fleet.ConfigFetch{Kind: kind, ClaimedUUID: q.Get("uuid"), ClaimedSerial: q.Get("serial"),
			ClaimedSecret: secret, RemoteAddr: remote}
		cfg, out, err := s.deps.Delivery.FetchConfig(r.Context(), f)
		if err != nil {
			s.nodeError(w, out, err)
			return
		}
		s.decision(w, out, nil)
		w.Header().Set("Content-Type", cfg.ContentType)
		w.Header().Set("Content-Length", strconv.Itoa(len(cfg.Body)))
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(cfg.Body)
	})
}

func peerAddr(remoteAddr string) (netip.Addr, error) {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return netip.Addr{}, err
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, err
	}
	return a.Unmap(), nil
}
