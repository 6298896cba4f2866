package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/guard"
	"berth.dev/berth/internal/rental"
)

// CarView is a car as docs/api.md shows it: GET /cars, GET /cars/{id},
// and with plate and host POST /host/cars and GET /host/cars.
type CarView struct {
	ID         int64  `json:"id"`
	Model      string `json:"model"`
	City       string `json:"city"`
	DailyPrice int64  `json:"dailyPrice"`
	Deposit    int64  `json:"deposit"`
	Currency   string `json:"currency"`
	Turnaround string `json:"turnaround"`
	// TimeZone is the zone of the car's city, which its times are shown in.
	TimeZone string `json:"timeZone"`
	// Only for the host who listed it.
	Plate  string `json:"plate,omitempty"`
	HostID int64  `json:"hostId,omitempty"`
}

func (s *Server) viewCar(ctx context.Context, c *rental.Car, host bool) CarView {
	v := CarView{ID: c.ID, Model: c.Model, City: c.City, DailyPrice: c.DailyPrice, Deposit: c.Deposit,
		Currency: c.Currency, Turnaround: rental.FormatTurnaround(c.Turnaround), TimeZone: s.Cars.Zone(ctx, c.City).String()}
	if host {
		v.Plate, v.HostID = c.Plate, c.HostID
	}
	return v
}

// CreateCarRequest is the body of POST /host/cars.
type CreateCarRequest struct {
	Plate      string `json:"plate"`
	Model      string `json:"model"`
	City       string `json:"city"`
	DailyPrice int64  `json:"dailyPrice"`
	Deposit    int64  `json:"deposit"`
	Currency   string `json:"currency"`
	Turnaround string `json:"turnaround,omitempty"`
}

func (s *Server) createCar(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	var req CreateCarRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	nc := rental.NewCar{HostID: c.ID, Plate: req.Plate, Model: req.Model, City: req.City,
		DailyPrice: req.DailyPrice, Deposit: req.Deposit, Currency: req.Currency}
	if req.Turnaround != "" {
		d, err := time.ParseDuration(req.Turnaround)
		if err != nil {
			return fault.Invalid("turnaround", "%q is not a duration like 2h or 90m", req.Turnaround)
		}
		nc.Turnaround = d
	}
	car, err := s.Cars.Create(r.Context(), nc)
	if err != nil {
		return err
	}
	w.Header().Set("Location", fmt.Sprintf("/cars/%d", car.ID))
	writeJSON(w, http.StatusCreated, s.viewCar(r.Context(), car, true))
	return nil
}

func (s *Server) getCar(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	id, err := pathID(r, "car")
	if err != nil {
		return err
	}
	car, err := s.Cars.Get(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.viewCar(r.Context(), car, false))
	return nil
}

// searchCars answers GET /cars?city=&from=&to=, a page at a time: limit
// (default 100, at most 500) cars in id order, after= the last id of the
// previous page, and nextAfter in the answer while there may be more.
func (s *Server) searchCars(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	q := r.URL.Query()
	sq := rental.SearchQuery{City: strings.ToUpper(q.Get("city"))}
	var err error
	if sq.From, err = parseTime("from", q.Get("from")); err != nil {
		return err
	}
	if sq.To, err = parseTime("to", q.Get("to")); err != nil {
		return err
	}
	if sq.Limit, sq.After, err = carPageOf(q); err != nil {
		return err
	}
	res, err := s.Cars.Search(r.Context(), sq)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "public, max-age=30")
	s.writeCars(w, r, res, false)
	return nil
}

// carPageOf reads a page of cars: ?limit= (0 when absent: the default)
// and ?after= (the last car id of the previous page).
func carPageOf(q url.Values) (limit int, after int64, err error) {
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > rental.MaxSearchLimit {
			return 0, 0, fault.Invalid("limit", "must be between 1 and %d", rental.MaxSearchLimit)
		}
	}
	if v := q.Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			return 0, 0, fault.Invalid("after", "must be a car id")
		}
	}
	return limit, after, nil
}

// writeCars answers 200 with a page of cars, and nextAfter while a next
// page may hold more.
//
// A search's page (host false) is put together from each car's public
// JSON, encoded once per car and calendar load (publicCarJSON): the same
// few hundred popular cars are listed thousands of times a second in a
// peak, and encoding them afresh each time was a quarter of the process's
// CPU. The bytes are those json.Encoder writes for the page (the host's
// view, below, still goes through it).
func (s *Server) writeCars(w http.ResponseWriter, r *http.Request, res *rental.SearchResult, host bool) {
	if !host {
		bp := pageBufs.Get().(*[]byte)
		b := (*bp)[:0]
		b = append(b, `{"cars":[`...)
		for i, c := range res.Cars {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, s.publicCarJSON(r.Context(), c)...)
		}
		b = append(b, ']')
		if res.More {
			b = strconv.AppendInt(append(b, `,"nextAfter":`...), res.Cars[len(res.Cars)-1].ID, 10)
		}
		b = append(b, "}\n"...)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b) // a client gone away is not an error of ours
		// net/http has copied or sent the bytes: the buffer is free.
		if cap(b) <= maxPooledPage {
			*bp = b
			pageBufs.Put(bp)
		}
		return
	}
	out := struct {
		Cars      []CarView `json:"cars"`
		NextAfter int64     `json:"nextAfter,omitempty"`
	}{Cars: make([]CarView, 0, len(res.Cars))}
	for _, c := range res.Cars {
		out.Cars = append(out.Cars, s.viewCar(r.Context(), c, host))
	}
	if res.More {
		out.NextAfter = res.Cars[len(res.Cars)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

// pageBufs are the buffers search pages are put together in. A page is
// tens of kilobytes (a hundred cars by default), written thousands of
// times a second in a peak: making each afresh was seven tenths of the
// bytes the process allocated in a car peak, and so most of its garbage
// collections. Pages above maxPooledPage (a few from the largest limits)
// are left to the collector, so that one large page does not stay
// allocated per buffer.
var pageBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledPage = 256 << 10

// encodedCar is a car's public JSON and the value it was made from.
type encodedCar struct {
	car  *rental.Car
	json []byte
}

// publicCarJSON returns c's public view (viewCar without the host's
// fields) as JSON, encoded once for each *rental.Car: a city calendar's
// reload brings new values, and with them a new encoding, so the JSON is
// never older than the calendar the search answered from. One entry is
// kept per car id.
func (s *Server) publicCarJSON(ctx context.Context, c *rental.Car) []byte {
	if v, ok := s.carJSON.Load(c.ID); ok && v.(*encodedCar).car == c {
		return v.(*encodedCar).json
	}
	b, err := json.Marshal(s.viewCar(ctx, c, false))
	if err != nil { // strings and numbers only: cannot fail
		panic(fmt.Sprintf("encode car %d: %v", c.ID, err))
	}
	s.carJSON.Store(c.ID, &encodedCar{car: c, json: b})
	return b
}

// carCalendar answers GET /cars/{id}/calendar?from=&to= with the busy
// times in from's offset.
func (s *Server) carCalendar(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	id, err := pathID(r, "car")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	from, err := parseTime("from", q.Get("from"))
	if err != nil {
		return err
	}
	to, err := parseTime("to", q.Get("to"))
	if err != nil {
		return err
	}
	busy, err := s.Cars.Calendar(r.Context(), id, from, to)
	if err != nil {
		return err
	}
	type span struct {
		From time.Time `json:"from"`
		To   time.Time `json:"to"`
	}
	out := make([]span, 0, len(busy))
	for _, b := range busy {
		out = append(out, span{From: b.From.In(from.Location()), To: b.To.In(from.Location())})
	}
	writeJSON(w, http.StatusOK, map[string]any{"carId": id, "busy": out})
	return nil
}

// createCarBooking is the car branch of POST /bookings: {"carId", "from",
// "to"}, with a required Idempotency-Key.
func (s *Server) createCarBooking(w http.ResponseWriter, r *http.Request, c auth.Caller, req createBookingRequest) error {
	// What the body asks for first: a body for both a car and a flight is
	// wrong with or without a key.
	switch {
	case req.FlightID != nil || req.FareClass != "" || req.Seats != nil || req.Quantity != nil:
		return fault.Invalid("carId", "a booking is for a car or for a flight, not both")
	case req.CarID == nil:
		return fault.Invalid("carId", "is required")
	}
	if err := checkCarIdempotencyKey(r); err != nil {
		return err
	}
	hr := rental.HoldRequest{CustomerID: c.ID, CarID: *req.CarID}
	var err error
	if hr.From, err = parseTime("from", req.From); err != nil {
		return err
	}
	if hr.To, err = parseTime("to", req.To); err != nil {
		return err
	}
	// The per-customer hold limit and the hold lane apply to cars too
	// (customers who block many cars).
	var b *booking.Booking
	err = s.Guard.Hold(r.Context(), guard.Intent{Customer: c.ID}, func(ctx context.Context) (err error) {
		b, err = s.Cars.Hold(ctx, hr)
		return s.heldInDatabase(ctx, booking.KindCar, err)
	})
	return answerHold(w, b, err)
}

// checkCarIdempotencyKey requires the Idempotency-Key header of a car
// booking (docs/api.md). The Idempotency-Key wrapper around POST /bookings has
// already refused a malformed key, and remembers and replays answers.
func checkCarIdempotencyKey(r *http.Request) error {
	if r.Header.Get("Idempotency-Key") == "" {
		return fault.New(fault.InvalidRequest, "a car booking needs an Idempotency-Key header")
	}
	return nil
}

// moveCarBooking hands a car over: pickup (CONFIRMED → ON_TRIP) or return
// (ON_TRIP → COMPLETED), by the car's host or an admin.
func (s *Server) moveCarBooking(from, to booking.Status) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
		id, err := pathID(r, "booking")
		if err != nil {
			return err
		}
		b, err := s.Lifecycle.Move(r.Context(), s.Pool, c, id, from, to)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, b.View())
		return nil
	}
}
