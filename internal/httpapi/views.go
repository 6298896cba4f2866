package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"berth.dev/berth/internal/audit"
	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/events"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/flight"
	"berth.dev/berth/internal/guard"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/rental"
)

// airports answers GET /airports: every airport with its time zone, which
// the app shows departure times in. It changes only when an operator adds
// an airport.
func (s *Server) airports(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	list, err := s.Flights.Airports(r.Context())
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "public, max-age=3600")
	writeJSON(w, http.StatusOK, map[string]any{"airports": list})
	return nil
}

// cities answers GET /cities: the cities cars are rented in, with the time
// zone a car's times are shown in.
func (s *Server) cities(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	list, err := s.Cars.Cities(r.Context())
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "public, max-age=3600")
	writeJSON(w, http.StatusOK, map[string]any{"cities": list})
	return nil
}

// hostCars answers GET /host/cars: a host's own cars (an admin's: all), a
// page at a time like GET /cars (limit, after, nextAfter).
func (s *Server) hostCars(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	limit, after, err := carPageOf(r.URL.Query())
	if err != nil {
		return err
	}
	if limit == 0 {
		limit = rental.DefaultSearchLimit
	}
	res, err := s.Cars.HostCars(r.Context(), c, limit, after)
	if err != nil {
		return err
	}
	s.writeCars(w, r, res, true)
	return nil
}

// hostBookings answers GET /host/bookings?status=&carId=: the bookings of
// a host's cars (an admin's: all), newest first, paged like GET /bookings.
func (s *Server) hostBookings(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	q := r.URL.Query()
	limit, before, err := pageOf(q.Get("limit"), q.Get("before"))
	if err != nil {
		return err
	}
	var f booking.HostFilter
	if v := q.Get("status"); v != "" {
		var ok bool
		if f.Status, ok = booking.ParseStatus(strings.ToUpper(v)); !ok {
			return fault.Invalid("status", "must be one of HELD, CONFIRMED, EXPIRED, CANCELLED, ON_TRIP, COMPLETED")
		}
	}
	if v := q.Get("carId"); v != "" {
		if f.CarID, err = strconv.ParseInt(v, 10, 64); err != nil || f.CarID < 1 {
			return fault.Invalid("carId", "must be a car id")
		}
	}
	list, err := booking.ListForHost(r.Context(), s.Pool, c, f, s.Clock.Now(), limit, before)
	if err != nil {
		return err
	}
	writeBookings(w, list)
	return nil
}

// adminFlightView is a flight as an operator watches it: every fare's
// counters and the waiting room.
type adminFlightView struct {
	FlightView
	WaitingRoom guard.RoomView `json:"waitingRoom"`
}

func (s *Server) adminViews(ctx context.Context, flights []*flight.Flight) ([]adminFlightView, error) {
	ids := make([]int64, len(flights))
	for i, f := range flights {
		ids[i] = f.ID
	}
	rooms, err := s.Guard.Room.Views(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]adminFlightView, 0, len(flights))
	for _, f := range flights {
		out = append(out, adminFlightView{FlightView: viewFlight(f, true), WaitingRoom: rooms[f.ID]})
	}
	return out, nil
}

// adminFlights answers GET /admin/flights?from=&to=&date=&limit=: the
// flights departing on date (without one: from now on), soonest first,
// with their counters.
func (s *Server) adminFlights(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	q := r.URL.Query()
	lq := flight.ListQuery{From: strings.ToUpper(q.Get("from")), To: strings.ToUpper(q.Get("to")), Limit: 50}
	switch {
	case lq.From != "" && !airportRe.MatchString(lq.From):
		return fault.Invalid("from", "must be a three-letter airport code")
	case lq.To != "" && !airportRe.MatchString(lq.To):
		return fault.Invalid("to", "must be a three-letter airport code")
	}
	var err error
	if v := q.Get("date"); v != "" {
		if lq.Date, err = parseDate(v); err != nil {
			return err
		}
	}
	if v := q.Get("limit"); v != "" {
		if lq.Limit, err = strconv.Atoi(v); err != nil || lq.Limit < 1 || lq.Limit > flight.MaxList {
			return fault.Invalid("limit", "must be between 1 and %d", flight.MaxList)
		}
	}
	flights, err := s.Flights.List(r.Context(), lq)
	if err != nil {
		return err
	}
	out, err := s.adminViews(r.Context(), flights)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"flights": out})
	return nil
}

// adminFlight answers GET /admin/flights/{id}.
func (s *Server) adminFlight(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	id, err := pathID(r, "flight")
	if err != nil {
		return err
	}
	f, err := s.Flights.Get(r.Context(), id)
	if err != nil {
		return err
	}
	out, err := s.adminViews(r.Context(), []*flight.Flight{f})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out[0])
	return nil
}

// adminEvents answers GET /admin/events: the outbox's backlog and each
// consumer's lag.
func (s *Server) adminEvents(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	st, err := events.ReadStatus(r.Context(), s.Pool, s.Consumers, s.Clock.Now())
	if err != nil {
		return err
	}
	type consumer struct {
		events.ConsumerLag
		LagSeconds float64 `json:"lagSeconds"`
	}
	cs := make([]consumer, 0, len(st.Consumers))
	for _, c := range st.Consumers {
		cs = append(cs, consumer{ConsumerLag: c, LagSeconds: c.Lag.Seconds()})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"backlog": st.Backlog, "oldestSeconds": st.OldestAge.Seconds(), "consumers": cs, "asOf": st.AsOf,
	})
	return nil
}

// lastAudit answers GET /admin/audit: the last recorded audit, by
// `berth audit` or POST /admin/audit. Before any, 200 with ranAt and ok
// null and no results: the route is there and answered, there is just no
// audit yet (a 404 read as an error, in the admin page's console too).
func (s *Server) lastAudit(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	rep, ok, err := audit.Last(r.Context(), s.Pool)
	if err != nil {
		return err
	}
	if !ok {
		writeJSON(w, http.StatusOK, map[string]any{"ranAt": nil, "ok": nil, "results": []audit.Result{}})
		return nil
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// runAudit answers POST /admin/audit: it checks the invariants now, as
// `berth audit` does, records the result and answers it.
func (s *Server) runAudit(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	o := s.Audit
	o.Now = s.Clock.Now()
	results, err := audit.Run(r.Context(), s.Pool, o)
	if err != nil {
		return err
	}
	if err := audit.Record(r.Context(), s.Pool, o.Now, results); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, audit.Report{At: o.Now, OK: !audit.Failed(results), Results: results})
	return nil
}

// refundQuote answers GET /bookings/{id}/refund-quote: what cancelling now
// would refund, from the very function the cancellation uses.
func (s *Server) refundQuote(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	id, err := pathID(r, "booking")
	if err != nil {
		return err
	}
	q, err := s.Lifecycle.Quote(r.Context(), s.Pool, c, id)
	if err != nil {
		return err
	}
	out := map[string]any{
		"bookingId": id, "refundAmount": q.Refund, "currency": q.Booking.Currency, "amount": q.Booking.Amount,
		"percent": q.Percent, "rule": q.Rule, "cancelReason": q.Reason, "asOf": q.At.UTC().Format(time.RFC3339),
	}
	// Which of the rule's tiers applies, so that a client can say it in
	// words ("50 %: cancelled 24–72 h before pick-up").
	if q.AtLeast >= 0 {
		out["noticeAtLeast"] = int64(q.AtLeast / time.Second)
	}
	if q.LessThan >= 0 {
		out["noticeLessThan"] = int64(q.LessThan / time.Second)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// bookingEvents answers GET /bookings/{id}/events: the booking's events
// that the outbox still keeps, in the order they happened, to whoever may
// see the booking.
func (s *Server) bookingEvents(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	id, err := pathID(r, "booking")
	if err != nil {
		return err
	}
	if _, err := booking.Get(r.Context(), s.Pool, c, id, s.Clock.Now()); err != nil {
		return err
	}
	evs, err := outbox.History(r.Context(), s.Pool, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"bookingId": id, "events": evs})
	return nil
}
