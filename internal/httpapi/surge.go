package httpapi

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/flight"
	"berth.dev/berth/internal/guard"
)

// The surge routes and the hooks that put the guard's layers around the
// handlers (docs/surge.md, docs/api.md "Surge: waiting room").

func (s *Server) surgeRoutes() {
	s.handle("PATCH /admin/flights/{id}", roles(auth.Admin), s.patchFlight)
	s.handle("GET /waiting-room/{ticket}", roles(auth.Customer), s.waitingRoom)
}

// laneRoom is the lane of waiting-room polls: limited per client, but
// without a concurrency slot, since they only ask Redis.
const laneRoom guard.Lane = "room"

// laneOf is the concurrency lane of a route: holds, public reads, probes
// and webhooks (never limited), and everything else.
func laneOf(pattern string, who access) guard.Lane {
	switch {
	case pattern == "GET /healthz" || pattern == "GET /readyz":
		return guard.LaneNone
	case pattern == "POST /payments/webhook":
		// Money from the gateway is never shed: it is signed, comes at the
		// gateway's pace, and a delay could let a paid hold expire.
		return guard.LaneNone
	case strings.HasPrefix(pattern, "GET /waiting-room/"):
		return laneRoom
	case pattern == "POST /bookings":
		return guard.LaneHold
	case pattern == "POST /bookings/{id}/payments" || pattern == "DELETE /bookings/{id}" || pattern == "POST /bookings/{id}/cancel":
		// Money first: a burst of holds never sheds a payment or a
		// cancellation.
		return guard.LaneMoney
	case who == nil && strings.HasPrefix(pattern, "GET "):
		return guard.LaneRead
	}
	return guard.LaneOther
}

// clientKey is whom the per-client request limit counts a request against:
// the token's subject, else the client's address. Signed webhooks from the
// payment gateway are not limited per client.
func clientKey(r *http.Request, c booking.Caller, who access) string {
	if who != nil {
		return "sub:" + strconv.FormatInt(c.ID, 10)
	}
	if r.URL.Path == "/payments/webhook" {
		return ""
	}
	return "ip:" + remoteHost(r)
}

// remoteHost is the address of r's client (the connection's peer: berth
// does not trust forwarding headers it cannot verify).
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// holdIntent describes a validated flight hold to the guard.
func holdIntent(r *http.Request, c booking.Caller, hr flight.HoldRequest) guard.Hold {
	return guard.Hold{Customer: c.ID, FlightID: hr.FlightID, FareClass: hr.FareClass, Seats: hr.Seats, Units: hr.Units(),
		Token: r.Header.Get("Waiting-Room-Token")}
}

// released tells the guard that a cancelled flight booking's seats are
// free again.
func (s *Server) released(ctx context.Context, b *booking.Booking) {
	if b.Kind == booking.KindFlight && b.Status == booking.Cancelled {
		s.Guard.Released(ctx, b.FlightID, b.FareClass, b.Seats)
	}
}

type roomView struct {
	Enabled        bool `json:"enabled"`
	AdmitPerSecond int  `json:"admitPerSecond"`
}

// patchFlight changes a flight's settings: today its waiting room.
func (s *Server) patchFlight(w http.ResponseWriter, r *http.Request, _ booking.Caller) error {
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
	writeJSON(w, http.StatusOK, struct {
		flightView
		WaitingRoom roomView `json:"waitingRoom"`
	}{viewFlight(f, true), roomView(room)})
	return nil
}

// waitingRoom tells a customer where their ticket stands, and hands out the
// admission token once it is their turn.
func (s *Server) waitingRoom(w http.ResponseWriter, r *http.Request, c booking.Caller) error {
	st, err := s.Guard.Room.Status(r.Context(), c.ID, r.PathValue("ticket"))
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	if !st.Admitted {
		writeJSON(w, http.StatusOK, map[string]any{"position": st.Position, "admitted": false})
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]any{"admitted": true, "token": st.Token, "expiresAt": st.ExpiresAt.UTC().Format(time.RFC3339Nano)})
	return nil
}
