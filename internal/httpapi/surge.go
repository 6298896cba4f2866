package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/flight"
	"berth.dev/berth/internal/guard"
)

// The hooks that put the guard's layers around the handlers, and the surge
// routes' handlers (docs/surge.md, docs/api.md "Surge: waiting room"). Each
// route's lane is in the route table (routes.go).

// clientKey is whom the per-client request limit counts a request against:
// the token's subject, else the client's address addr. (Routes of
// LaneNone, the gateway's signed webhook among them, are not limited at
// all.)
func clientKey(addr string, c auth.Caller, who access) string {
	if who != nil {
		return "sub:" + strconv.FormatInt(c.ID, 10)
	}
	return "ip:" + addr
}

// clientAddr is the address of r's client: the connection's peer, unless
// the peer is one of the trusted proxies (BERTH_TRUSTED_PROXIES). Then it
// is the nearest address in X-Forwarded-For that is not a trusted proxy,
// read from the right, where the proxies append: the entries further left
// are whatever the client sent and are never believed. A malformed entry
// ends the walk at the last address a trusted proxy vouched for. An IPv6
// client is its /64 (ClientNet).
func (s *Server) clientAddr(r *http.Request) string {
	peer, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		peer = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(peer)
	if err != nil {
		return peer
	}
	addr = addr.WithZone("").Unmap()
	if len(s.TrustedProxies) == 0 || !s.trusted(addr) {
		return guard.ClientNet(addr)
	}
	var hops []string
	for _, h := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(h, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		hop := strings.TrimSpace(hops[i])
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(hop, "["), "]"))
		if err != nil {
			ap, err := netip.ParseAddrPort(hop) // some proxies add the port
			if err != nil {
				break
			}
			a = ap.Addr()
		}
		// One client, one key: a zone or the mapped form of an IPv4
		// address does not make another.
		addr = a.WithZone("").Unmap()
		if !s.trusted(addr) {
			break
		}
	}
	return guard.ClientNet(addr)
}

// trusted reports whether a is one of the trusted proxies.
func (s *Server) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range s.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// holdIntent describes a validated flight hold to the guard.
func holdIntent(r *http.Request, c auth.Caller, hr flight.HoldRequest) guard.Intent {
	return guard.Intent{Customer: c.ID, FlightID: hr.FlightID, FareClass: hr.FareClass, Seats: hr.Seats, Units: hr.Units(),
		Token: r.Header.Get("Waiting-Room-Token")}
}

// patchFlight changes a flight's settings: today its waiting room.
func (s *Server) patchFlight(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	id, err := pathID(r, "flight")
	if err != nil {
		return err
	}
	var req struct {
		WaitingRoom *struct {
			Enabled        *bool `json:"enabled"`
			AdmitPerSecond *int  `json:"admitPerSecond"`
		} `json:"waitingRoom"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	switch {
	case req.WaitingRoom == nil:
		return fault.Invalid("waitingRoom", "is required")
	case req.WaitingRoom.Enabled == nil:
		return fault.Invalid("waitingRoom.enabled", "is required")
	case req.WaitingRoom.AdmitPerSecond != nil && (*req.WaitingRoom.AdmitPerSecond < 1 || *req.WaitingRoom.AdmitPerSecond > 100_000):
		return fault.Invalid("waitingRoom.admitPerSecond", "must be between 1 and 100000")
	}
	per := 0
	if req.WaitingRoom.AdmitPerSecond != nil {
		per = *req.WaitingRoom.AdmitPerSecond
	}
	room, err := s.Guard.Room.Configure(r.Context(), id, *req.WaitingRoom.Enabled, per)
	if err != nil {
		return err
	}
	f, err := s.Flights.Get(r.Context(), id)
	if err != nil {
		return err
	}
	// The answer is the flight as GET /admin/flights/{id} shows it, with
	// the room as just set (a read of the rooms may be a moment older).
	views, err := s.adminViews(r.Context(), []*flight.Flight{f})
	if err != nil {
		return err
	}
	v := views[0]
	v.WaitingRoom.Enabled, v.WaitingRoom.AdmitPerSecond = room.Enabled, room.AdmitPerSecond
	writeJSON(w, http.StatusOK, v)
	return nil
}

// waitingRoom tells a customer where their ticket stands, and hands out the
// admission token once it is their turn.
func (s *Server) waitingRoom(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	st, err := s.Guard.Room.Status(r.Context(), c.ID, r.PathValue("ticket"))
	if err != nil {
		return err
	}
	if !st.Admitted {
		writeJSON(w, http.StatusOK, map[string]any{"position": st.Position, "admitted": false})
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]any{"admitted": true, "token": st.Token, "expiresAt": st.ExpiresAt.UTC().Format(time.RFC3339Nano)})
	return nil
}
