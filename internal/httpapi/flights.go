package httpapi

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/flight"
	"berth.dev/berth/internal/policy"
)

// FareView is a fare class as docs/api.md shows it; the counters
// (capacity, overbookLimit, sold, held, buckets) only to admins.
type FareView struct {
	FareClass     string `json:"fareClass"`
	Price         int64  `json:"price"`
	Currency      string `json:"currency"`
	Available     int    `json:"available"`
	Capacity      *int   `json:"capacity,omitempty"`
	OverbookLimit *int   `json:"overbookLimit,omitempty"`
	Sold          *int   `json:"sold,omitempty"`
	Held          *int   `json:"held,omitempty"`
	Buckets       *int   `json:"buckets,omitempty"`
}

// FlightView is a flight as docs/api.md shows it: GET /flights and
// GET /flights/{id}, and with its fares' counters POST /admin/flights.
type FlightView struct {
	ID          int64      `json:"id"`
	Code        string     `json:"code"`
	From        string     `json:"from"`
	To          string     `json:"to"`
	DepartureAt time.Time  `json:"departureAt"`
	ArrivalAt   time.Time  `json:"arrivalAt"`
	Fares       []FareView `json:"fares"`
}

func viewFare(f flight.Fare, admin bool) FareView {
	v := FareView{FareClass: f.Class, Price: f.Price, Currency: f.Currency, Available: f.Available()}
	if admin {
		v.Capacity, v.OverbookLimit, v.Sold, v.Held, v.Buckets = &f.Capacity, &f.OverbookLimit, &f.Sold, &f.Held, &f.Buckets
	}
	return v
}

func viewFlight(f *flight.Flight, admin bool) FlightView {
	v := FlightView{ID: f.ID, Code: f.Code, From: f.From, To: f.To, DepartureAt: f.DepartureAt, ArrivalAt: f.ArrivalAt,
		Fares: make([]FareView, 0, len(f.Fares))}
	for _, fare := range f.Fares {
		v.Fares = append(v.Fares, viewFare(fare, admin))
	}
	return v
}

var airportRe = regexp.MustCompile(`^[A-Z]{3}$`)

func (s *Server) searchFlights(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	q := r.URL.Query()
	from, to := strings.ToUpper(q.Get("from")), strings.ToUpper(q.Get("to"))
	switch {
	case !airportRe.MatchString(from):
		return fault.Invalid("from", "must be a three-letter airport code")
	case !airportRe.MatchString(to):
		return fault.Invalid("to", "must be a three-letter airport code")
	}
	// Without a date: the next seven days.
	var date time.Time
	if v := q.Get("date"); v != "" || q.Has("date") {
		var err error
		if date, err = parseDate(v); err != nil {
			return err
		}
		// The date is local to the origin: it is over everywhere once it is
		// over at UTC-12, where each date ends last.
		y, m, d := s.Clock.Now().UTC().Add(-12 * time.Hour).Date()
		if date.Before(time.Date(y, m, d, 0, 0, 0, 0, time.UTC)) {
			return fault.Invalid("date", "%s is in the past", v)
		}
	}
	flights, err := s.Flights.Search(r.Context(), from, to, date)
	if err != nil {
		return err
	}
	out := make([]FlightView, 0, len(flights))
	for _, f := range flights {
		out = append(out, viewFlight(f, false))
	}
	w.Header().Set("Cache-Control", "public, max-age=5")
	writeJSON(w, http.StatusOK, map[string]any{"flights": out})
	return nil
}

// parseDate reads a departure date, local to the origin.
func parseDate(v string) (time.Time, error) {
	date, err := time.Parse(time.DateOnly, v)
	if err != nil {
		return time.Time{}, fault.Invalid("date", "must be a date like 2026-12-20")
	}
	return date, nil
}

func (s *Server) getFlight(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	id, err := pathID(r, "flight")
	if err != nil {
		return err
	}
	f, err := s.Flights.Get(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewFlight(f, false))
	return nil
}

func (s *Server) seatMap(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	id, err := pathID(r, "flight")
	if err != nil {
		return err
	}
	m, err := s.Flights.SeatMap(r.Context(), id)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "public, max-age=2")
	writeJSON(w, http.StatusOK, map[string]any{"flightId": m.FlightID, "asOf": m.AsOf.UTC(), "departed": m.Departed, "seats": m.Seats})
	return nil
}

// CreateFlightRequest is the body of POST /admin/flights.
type CreateFlightRequest struct {
	Code        string        `json:"code"`
	From        string        `json:"from"`
	To          string        `json:"to"`
	DepartureAt string        `json:"departureAt"`
	ArrivalAt   string        `json:"arrivalAt"`
	Fares       []FareRequest `json:"fares"`
}

// FareRequest is one fare class of a CreateFlightRequest.
type FareRequest struct {
	FareClass     string   `json:"fareClass"`
	Price         int64    `json:"price"`
	Currency      string   `json:"currency"`
	Capacity      int      `json:"capacity"`
	OverbookLimit int      `json:"overbookLimit"`
	Seats         []string `json:"seats"`
	// Refundable is the percentage refunded up to RefundCutoff before
	// departure (default 100 % up to 24h).
	Refundable   *int   `json:"refundable,omitempty"`
	RefundCutoff string `json:"refundCutoff,omitempty"`
	// Buckets splits the class's counter over this many rows.
	Buckets int `json:"buckets"`
}

func (s *Server) createFlight(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	var req CreateFlightRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	nf := flight.NewFlight{Code: req.Code, From: req.From, To: req.To}
	var err error
	if nf.DepartureAt, err = parseTime("departureAt", req.DepartureAt); err != nil {
		return err
	}
	if nf.ArrivalAt, err = parseTime("arrivalAt", req.ArrivalAt); err != nil {
		return err
	}
	for i, f := range req.Fares {
		rule := policy.FlightDefault
		if f.Refundable != nil || f.RefundCutoff != "" {
			percent, cutoff := 100, 24*time.Hour
			if f.Refundable != nil {
				percent = *f.Refundable
			}
			if f.RefundCutoff != "" {
				if cutoff, err = time.ParseDuration(f.RefundCutoff); err != nil {
					return fault.Invalid(fmt.Sprintf("fares[%d].refundCutoff", i), "must be a duration like 24h")
				}
			}
			rule = policy.Flight(percent, cutoff)
		}
		nf.Fares = append(nf.Fares, flight.NewFare{Class: f.FareClass, Price: f.Price, Currency: f.Currency,
			Capacity: f.Capacity, OverbookLimit: f.OverbookLimit, Seats: f.Seats, RefundRule: rule, Buckets: f.Buckets})
	}
	f, err := s.Flights.Create(r.Context(), nf)
	if err != nil {
		return err
	}
	w.Header().Set("Location", fmt.Sprintf("/flights/%d", f.ID))
	writeJSON(w, http.StatusCreated, viewFlight(f, true))
	return nil
}

func (s *Server) patchFare(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	id, err := pathID(r, "flight")
	if err != nil {
		return err
	}
	var req struct {
		OverbookLimit *int `json:"overbookLimit"`
		Buckets       *int `json:"buckets"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.OverbookLimit == nil && req.Buckets == nil {
		return fault.Invalid("overbookLimit", "give overbookLimit or buckets")
	}
	f, err := s.Flights.ChangeFare(r.Context(), id, r.PathValue("fareClass"),
		flight.FareChange{OverbookLimit: req.OverbookLimit, Buckets: req.Buckets})
	if err != nil {
		return err
	}
	// A raised limit puts units back on sale: a sold-out hint must not
	// turn buyers away until it lapses.
	s.Guard.Released(r.Context(), id, f.Class, nil)
	writeJSON(w, http.StatusOK, viewFare(*f, true))
	return nil
}
