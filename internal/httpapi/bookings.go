package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/flight"
	"berth.dev/berth/internal/guard"
)

// createBookingRequest is the body of POST /bookings, for any kind: the
// fields present say which.
type createBookingRequest struct {
	FlightID  *int64   `json:"flightId"`
	FareClass string   `json:"fareClass"`
	Seats     []string `json:"seats"`
	Quantity  *int     `json:"quantity"`
	// A car booking (cars.go).
	CarID *int64 `json:"carId"`
	From  string `json:"from"`
	To    string `json:"to"`
}

func (s *Server) createBooking(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	var req createBookingRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.CarID != nil || req.From != "" || req.To != "" {
		return s.createCarBooking(w, r, c, req)
	}
	if req.FlightID == nil {
		return fault.Invalid("flightId", "is required")
	}
	hr := flight.HoldRequest{CustomerID: c.ID, FlightID: *req.FlightID, FareClass: req.FareClass, Seats: req.Seats}
	if req.Quantity != nil {
		hr.Quantity = *req.Quantity
		if hr.Quantity == 0 {
			return fault.Invalid("quantity", "must be between 1 and %d", flight.MaxSeats)
		}
	}
	if err := hr.Validate(); err != nil {
		return err
	}
	var b *booking.Booking
	err := s.Guard.Hold(r.Context(), holdIntent(r, c, hr), func(ctx context.Context) (err error) {
		b, err = s.Flights.Hold(ctx, hr)
		return s.heldInDatabase(ctx, booking.KindFlight, err)
	})
	return answerHold(w, b, err)
}

// heldInDatabase counts a hold of kind that reached the database (not one
// the surge layers turned away) and returns its error.
func (s *Server) heldInDatabase(ctx context.Context, kind booking.Kind, err error) error {
	s.metrics.hold(string(kind), guard.AsOverload(ctx, err))
	return err
}

// answerHold answers 201 with the booking, or returns the error to answer.
func answerHold(w http.ResponseWriter, b *booking.Booking, err error) error {
	if err != nil {
		return err
	}
	w.Header().Set("Location", fmt.Sprintf("/bookings/%d", b.ID))
	writeJSON(w, http.StatusCreated, b.View())
	return nil
}

func (s *Server) getBooking(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	id, err := pathID(r, "booking")
	if err != nil {
		return err
	}
	b, err := booking.Get(r.Context(), s.Pool, c, id, s.Clock.Now())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b.View())
	return nil
}

func (s *Server) listBookings(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	q := r.URL.Query()
	limit, before, err := pageOf(q.Get("limit"), q.Get("before"))
	if err != nil {
		return err
	}
	list, err := booking.List(r.Context(), s.Pool, c, s.Clock.Now(), limit, before)
	if err != nil {
		return err
	}
	writeBookings(w, list)
	return nil
}

// pageOf reads a page of bookings: ?limit= (1–100, default 20) and
// ?before= (a booking id; the page holds older ones).
func pageOf(limitParam, beforeParam string) (limit int, before int64, err error) {
	limit = 20
	if limitParam != "" {
		n, err := strconv.Atoi(limitParam)
		if err != nil || n < 1 || n > 100 {
			return 0, 0, fault.Invalid("limit", "must be between 1 and 100")
		}
		limit = n
	}
	if beforeParam != "" {
		n, err := strconv.ParseInt(beforeParam, 10, 64)
		if err != nil || n < 1 {
			return 0, 0, fault.Invalid("before", "must be a booking id")
		}
		before = n
	}
	return limit, before, nil
}

// writeBookings answers 200 {"bookings": [...]}.
func writeBookings(w http.ResponseWriter, list []*booking.Booking) {
	out := make([]booking.View, 0, len(list))
	for _, b := range list {
		out = append(out, b.View())
	}
	writeJSON(w, http.StatusOK, map[string]any{"bookings": out})
}

func (s *Server) cancelBooking(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	id, err := pathID(r, "booking")
	if err != nil {
		return err
	}
	b, err := s.Lifecycle.Cancel(r.Context(), s.Pool, c, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b.View())
	return nil
}
