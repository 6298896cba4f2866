package apptest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/flight"
	"berth.dev/berth/internal/httpapi"
	"berth.dev/berth/internal/payment"
)

// Client calls berth's API at Base as the bearer of Token, the way
// docs/api.md describes it: each method sends one request and decodes the
// answer into the very struct the server encodes, refusing fields it does
// not know, so a renamed or added field of an answer fails the test that
// reads it. Methods named Try… return the problem of an error answer for
// tests that expect one; the others fail the test on any answer but the
// documented success.
type Client struct {
	Base, Token string
	// RoomToken is sent as the Waiting-Room-Token of holds (WithRoomToken).
	RoomToken string
}

// Problem is an error answer: docs/api.md's problem document, decoded
// into the struct the server encodes, with what some problems carry
// besides.
type Problem struct {
	httpapi.Problem
	// Ticket and Position are a 429 waiting_room's place in the queue
	// (nil Position: none given).
	Ticket   string `json:"ticket"`
	Position *int   `json:"position"`
	// RetryAfter is the Retry-After header ("" without one).
	RetryAfter string `json:"-"`
}

// String shows p as a test failure does: status, code, field and detail.
func (p *Problem) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", p.Status, p.Code)
	if p.Field != "" {
		fmt.Fprintf(&b, " (field %s)", p.Field)
	}
	if p.Detail != "" {
		fmt.Fprintf(&b, ": %s", p.Detail)
	}
	return b.String()
}

// Is reports whether p is the problem status with code; nil is no problem.
func (p *Problem) Is(status int, code string) bool {
	return p != nil && p.Status == status && p.Code == code
}

// Customer returns a client for s acting as customer id. Its token, like
// Token's, is valid for a day of the fake clock from now: a test that moves
// the clock further asks for a new client.
func (s *Server) Customer(id int64) Client {
	return Client{Base: s.URL, Token: s.Token("customer", id)}
}

// Host returns a client for s acting as host id.
func (s *Server) Host(id int64) Client { return Client{Base: s.URL, Token: s.Token("host", id)} }

// Admin returns a client for s acting as admin 1.
func (s *Server) Admin() Client { return Client{Base: s.URL, Token: s.Token("admin", 1)} }

// Anonymous returns a client for s without a token.
func (s *Server) Anonymous() Client { return Client{Base: s.URL} }

// HoldSeats holds seats of class on flightID: POST /bookings → 201.
func (c Client) HoldSeats(t testing.TB, flightID int64, class string, seats ...string) booking.View {
	t.Helper()
	v, p := c.TryHoldSeats(t, flightID, class, seats...)
	return must(t, v, p, "hold %s %v on flight %d", class, seats, flightID)
}

// TryHoldSeats is HoldSeats answering the problem of a refusal.
func (c Client) TryHoldSeats(t testing.TB, flightID int64, class string, seats ...string) (booking.View, *Problem) {
	t.Helper()
	if seats == nil {
		seats = []string{}
	}
	var v booking.View
	p := c.call(t, http.MethodPost, "/bookings", c.roomHeader(), SeatHold{FlightID: flightID, FareClass: class, Seats: seats}, http.StatusCreated, &v)
	return v, p
}

// HoldQuantity holds n seats of class on flightID without choosing them.
func (c Client) HoldQuantity(t testing.TB, flightID int64, class string, n int) booking.View {
	t.Helper()
	v, p := c.TryHoldQuantity(t, flightID, class, n)
	return must(t, v, p, "hold %d %s on flight %d", n, class, flightID)
}

// TryHoldQuantity is HoldQuantity answering the problem of a refusal.
func (c Client) TryHoldQuantity(t testing.TB, flightID int64, class string, n int) (booking.View, *Problem) {
	t.Helper()
	var v booking.View
	p := c.call(t, http.MethodPost, "/bookings", c.roomHeader(), QuantityHold{FlightID: flightID, FareClass: class, Quantity: n}, http.StatusCreated, &v)
	return v, p
}

// roomHeader is the header of a hold: the waiting room's token, if any.
func (c Client) roomHeader() map[string]string {
	if c.RoomToken == "" {
		return nil
	}
	return map[string]string{"Waiting-Room-Token": c.RoomToken}
}

// SeatHold and QuantityHold are the bodies of POST /bookings for a
// flight, for tests that send them over a transport of their own (faults).
type SeatHold struct {
	FlightID  int64    `json:"flightId"`
	FareClass string   `json:"fareClass"`
	Seats     []string `json:"seats"`
}

type QuantityHold struct {
	FlightID  int64  `json:"flightId"`
	FareClass string `json:"fareClass"`
	Quantity  int    `json:"quantity"`
}

// HoldCar holds carID over [from, to), written in from's offset, under a
// fresh Idempotency-Key.
func (c Client) HoldCar(t testing.TB, carID int64, from, to time.Time) booking.View {
	t.Helper()
	v, p := c.TryHoldCar(t, carID, from, to)
	return must(t, v, p, "hold car %d %s–%s", carID, from.Format(time.RFC3339), to.Format(time.RFC3339))
}

// TryHoldCar is HoldCar answering the problem of a refusal.
func (c Client) TryHoldCar(t testing.TB, carID int64, from, to time.Time) (booking.View, *Problem) {
	t.Helper()
	return c.TryHoldCarWithKey(t, NewKey(), carID, from, to)
}

// TryHoldCarWithKey is TryHoldCar under Idempotency-Key key.
func (c Client) TryHoldCarWithKey(t testing.TB, key string, carID int64, from, to time.Time) (booking.View, *Problem) {
	t.Helper()
	var v booking.View
	body := struct {
		CarID int64  `json:"carId"`
		From  string `json:"from"`
		To    string `json:"to"`
	}{carID, from.Format(time.RFC3339), to.Format(time.RFC3339)}
	p := c.call(t, http.MethodPost, "/bookings", map[string]string{"Idempotency-Key": key}, body, http.StatusCreated, &v)
	return v, p
}

// GetBooking reads booking id: GET /bookings/{id} → 200.
func (c Client) GetBooking(t testing.TB, id int64) booking.View {
	t.Helper()
	v, p := c.TryGetBooking(t, id)
	return must(t, v, p, "get booking %d", id)
}

// TryGetBooking is GetBooking answering the problem of a refusal.
func (c Client) TryGetBooking(t testing.TB, id int64) (booking.View, *Problem) {
	t.Helper()
	var v booking.View
	return v, c.call(t, http.MethodGet, fmt.Sprintf("/bookings/%d", id), nil, nil, http.StatusOK, &v)
}

// Bookings lists the caller's bookings, newest first: GET /bookings with
// query (e.g. "limit=5"; "" for none).
func (c Client) Bookings(t testing.TB, query string) []booking.View {
	t.Helper()
	return c.list(t, "/bookings", query)
}

// HostBookings lists the bookings of the caller's cars: GET /host/bookings
// with query (e.g. "status=EXPIRED").
func (c Client) HostBookings(t testing.TB, query string) []booking.View {
	t.Helper()
	return c.list(t, "/host/bookings", query)
}

func (c Client) list(t testing.TB, path, query string) []booking.View {
	t.Helper()
	if query != "" {
		path += "?" + query
	}
	var out struct {
		Bookings []booking.View `json:"bookings"`
	}
	if p := c.call(t, http.MethodGet, path, nil, nil, http.StatusOK, &out); p != nil {
		t.Fatalf("GET %s: %s", path, p)
	}
	return out.Bookings
}

// Cancel cancels booking id: DELETE /bookings/{id} → 200.
func (c Client) Cancel(t testing.TB, id int64) booking.View {
	t.Helper()
	v, p := c.TryCancel(t, id)
	return must(t, v, p, "cancel booking %d", id)
}

// TryCancel is Cancel answering the problem of a refusal.
func (c Client) TryCancel(t testing.TB, id int64) (booking.View, *Problem) {
	t.Helper()
	var v booking.View
	return v, c.call(t, http.MethodDelete, fmt.Sprintf("/bookings/%d", id), nil, nil, http.StatusOK, &v)
}

// Extend extends the hold of booking id: POST /bookings/{id}/extend → 200.
func (c Client) Extend(t testing.TB, id int64) booking.View {
	t.Helper()
	v, p := c.TryExtend(t, id)
	return must(t, v, p, "extend booking %d", id)
}

// TryExtend is Extend answering the problem of a refusal.
func (c Client) TryExtend(t testing.TB, id int64) (booking.View, *Problem) {
	t.Helper()
	var v booking.View
	return v, c.call(t, http.MethodPost, fmt.Sprintf("/bookings/%d/extend", id), nil, nil, http.StatusOK, &v)
}

// AssignSeats chooses the seats of quantity booking id:
// POST /bookings/{id}/seats → 200.
func (c Client) AssignSeats(t testing.TB, id int64, seats ...string) booking.View {
	t.Helper()
	v, p := c.TryAssignSeats(t, id, seats...)
	return must(t, v, p, "assign seats %v to booking %d", seats, id)
}

// TryAssignSeats is AssignSeats answering the problem of a refusal.
func (c Client) TryAssignSeats(t testing.TB, id int64, seats ...string) (booking.View, *Problem) {
	t.Helper()
	var v booking.View
	body := struct {
		Seats []string `json:"seats"`
	}{seats}
	return v, c.call(t, http.MethodPost, fmt.Sprintf("/bookings/%d/seats", id), nil, body, http.StatusOK, &v)
}

// StartPayment starts the charge of booking id under key:
// POST /bookings/{id}/payments → 201.
func (c Client) StartPayment(t testing.TB, id int64, key string) payment.Charge {
	t.Helper()
	ch, p := c.TryStartPayment(t, id, key)
	return must(t, ch, p, "pay booking %d", id)
}

// TryStartPayment is StartPayment answering the problem of a refusal.
func (c Client) TryStartPayment(t testing.TB, id int64, key string) (payment.Charge, *Problem) {
	t.Helper()
	var ch payment.Charge
	var h map[string]string
	if key != "" {
		h = map[string]string{"Idempotency-Key": key}
	}
	return ch, c.call(t, http.MethodPost, fmt.Sprintf("/bookings/%d/payments", id), h, nil, http.StatusCreated, &ch)
}

// Pay pays for held booking id as a person does: it starts the charge,
// clicks Pay on the built-in gateway's checkout page (BERTH_PAYSIM) and
// waits until the gateway's webhook has moved the booking out of HELD,
// which it returns.
func (c Client) Pay(t testing.TB, id int64) booking.View {
	t.Helper()
	ch := c.StartPayment(t, id, NewKey())
	if r := Do(t, ch.CheckoutURL+"/pay", Request{Method: http.MethodPost}); r.Status != http.StatusOK {
		t.Fatalf("pay booking %d at the checkout page: %d %s", id, r.Status, r.Body)
	}
	var v booking.View
	Eventually(t, time.Minute, fmt.Sprintf("booking %d is still HELD after its payment", id), func() bool {
		v = c.GetBooking(t, id)
		return v.Status != booking.Held
	})
	return v
}

// SeatMap is the answer of GET /flights/{id}/seats.
type SeatMap struct {
	FlightID int64         `json:"flightId"`
	AsOf     time.Time     `json:"asOf"`
	Departed bool          `json:"departed"`
	Seats    []flight.Seat `json:"seats"`
}

// Status returns seat's status on the map, or "" when the map has no such
// seat.
func (m SeatMap) Status(seat string) string {
	for _, s := range m.Seats {
		if s.SeatNo == seat {
			return s.Status
		}
	}
	return ""
}

// SeatMap reads flightID's seat map: GET /flights/{id}/seats → 200.
func (c Client) SeatMap(t testing.TB, flightID int64) SeatMap {
	t.Helper()
	var m SeatMap
	if p := c.call(t, http.MethodGet, fmt.Sprintf("/flights/%d/seats", flightID), nil, nil, http.StatusOK, &m); p != nil {
		t.Fatalf("seat map of flight %d: %s", flightID, p)
	}
	return m
}

// call sends one request and decodes a want answer into out (strictly:
// a field out does not know fails t) and returns nil, or decodes any other
// answer as a problem document and returns it. An answer that is neither
// fails t.
func (c Client) call(t testing.TB, method, path string, header map[string]string, body any, want int, out any) *Problem {
	t.Helper()
	r := Do(t, c.Base, Request{Method: method, Path: path, Token: c.Token, Body: body, Header: header})
	if r.Status == want {
		if err := decodeStrict(r.Body, out); err != nil {
			t.Fatalf("%s %s: %d answer %s does not decode as %T: %v", method, path, r.Status, r.Body, out, err)
		}
		return nil
	}
	p := &Problem{RetryAfter: r.Header.Get("Retry-After")}
	if err := decodeStrict(r.Body, p); err != nil || p.Code == "" || p.Status != r.Status {
		t.Fatalf("%s %s: %d %s, want %d or a problem document (%v)", method, path, r.Status, r.Body, want, err)
	}
	return p
}

var keySeq atomic.Int64

// NewKey returns an Idempotency-Key no other request of this test binary
// uses.
func NewKey() string { return fmt.Sprintf("apptest-%d-%d", time.Now().UnixNano(), keySeq.Add(1)) }

// decodeStrict decodes b into v, refusing unknown fields and trailing data.
func decodeStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}

// must is v, or the end of the test saying what failed (what, args) and why.
func must[T any](t testing.TB, v T, p *Problem, what string, args ...any) T {
	t.Helper()
	if p != nil {
		t.Fatalf("%s: %s", fmt.Sprintf(what, args...), p)
	}
	return v
}
