package httpapi

import (
	"net/http"
	"time"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/flight"
)

func (s *Server) extendBooking(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	id, err := pathID(r, "booking")
	if err != nil {
		return err
	}
	b, err := s.Lifecycle.Extend(r.Context(), s.Pool, c, id, s.HoldExtension)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b.View())
	return nil
}

func (s *Server) assignSeats(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	id, err := pathID(r, "booking")
	if err != nil {
		return err
	}
	var req struct {
		Seats []string `json:"seats"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.Seats == nil {
		return fault.Invalid("seats", "is required")
	}
	b, err := s.Flights.AssignSeats(r.Context(), c.ID, id, req.Seats)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b.View())
	return nil
}

// WaitView is a waitlist entry as docs/api.md shows it.
type WaitView struct {
	WaitlistID int64     `json:"waitlistId"`
	FlightID   int64     `json:"flightId"`
	FareClass  string    `json:"fareClass"`
	Quantity   int       `json:"quantity"`
	Position   int       `json:"position"`
	Status     string    `json:"status"`
	BookingID  int64     `json:"bookingId,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
}

func viewWait(e *flight.WaitEntry) WaitView {
	return WaitView{WaitlistID: e.ID, FlightID: e.FlightID, FareClass: e.FareClass, Quantity: e.Quantity,
		Position: e.Position, Status: e.Status, BookingID: e.BookingID, CreatedAt: e.CreatedAt.UTC()}
}

func (s *Server) joinWaitlist(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	id, err := pathID(r, "flight")
	if err != nil {
		return err
	}
	var req struct {
		FareClass string `json:"fareClass"`
		Quantity  *int   `json:"quantity"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.Quantity == nil {
		return fault.Invalid("quantity", "is required")
	}
	e, err := s.Flights.JoinWaitlist(r.Context(), c.ID, id, req.FareClass, *req.Quantity)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, viewWait(e))
	return nil
}

func (s *Server) listWaitlist(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	list, err := s.Flights.Waitlist(r.Context(), c.ID)
	if err != nil {
		return err
	}
	out := make([]WaitView, 0, len(list))
	for _, e := range list {
		out = append(out, viewWait(e))
	}
	writeJSON(w, http.StatusOK, map[string]any{"waitlist": out})
	return nil
}

func (s *Server) leaveWaitlist(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	id, err := pathID(r, "waitlist entry")
	if err != nil {
		return err
	}
	e, err := s.Flights.LeaveWaitlist(r.Context(), c.ID, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewWait(e))
	return nil
}
