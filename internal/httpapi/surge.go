package httpapi

import (
	"net"
	"net/http"
	"strconv"
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
// the token's subject, else the client's address. (Routes of LaneNone, the
// gateway's signed webhook among them, are not limited at all.)
func clientKey(r *http.Request, c auth.Caller, who access) string {
	if who != nil {
		return "sub:" + strconv.FormatInt(c.ID, 10)
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
func holdIntent(r *http.Request, c auth.Caller, hr flight.HoldRequest) guard.Intent {
	return guard.Intent{Customer: c.ID, FlightID: hr.FlightID, FareClass: hr.FareClass, Seats: hr.Seats, Units: hr.Units(),
		Token: r.Header.Get("Waiting-Room-Token")}
}

// RoomSettings is a flight's waiting room as PATCH /admin/flights/{id}
// answers it.
type RoomSettings struct {
	Enabled        bool `json:"enabled"`
	AdmitPerSecond int  `json:"admitPerSecond"`
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
	writeJSON(w, http.StatusOK, struct {
		FlightView
		WaitingRoom RoomSettings `json:"waitingRoom"`
	}{viewFlight(f, true), RoomSettings(room)})
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
