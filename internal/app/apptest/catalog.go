package apptest

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/internal/guard"
	"berth.dev/berth/internal/httpapi"
)

// This file is the typed client's part for what is sold and waited for:
// flights and their fares (an admin's), cars (a host's), searches, the
// waitlist and the waiting room.

// Flight is the body of POST /admin/flights. Zero fields take a test's
// usual values: a fresh code, SGN→HAN, arriving two hours after
// departure.
type Flight struct {
	Code                   string
	From, To               string
	DepartureAt, ArrivalAt time.Time
	Fares                  []Fare
}

var flightSeq atomic.Int64

func (f Flight) wire() httpapi.CreateFlightRequest {
	if f.Code == "" {
		f.Code = fmt.Sprintf("VN%d", 100+flightSeq.Add(1))
	}
	if f.From == "" {
		f.From, f.To = "SGN", "HAN"
	}
	if f.ArrivalAt.IsZero() {
		f.ArrivalAt = f.DepartureAt.Add(2 * time.Hour)
	}
	w := httpapi.CreateFlightRequest{Code: f.Code, From: f.From, To: f.To, DepartureAt: f.DepartureAt.Format(time.RFC3339),
		ArrivalAt: f.ArrivalAt.Format(time.RFC3339), Fares: []httpapi.FareRequest{}}
	for _, fa := range f.Fares {
		nf := httpapi.FareRequest{FareClass: fa.Class, Price: fa.Price, Currency: fa.Currency, Capacity: fa.Capacity,
			OverbookLimit: fa.OverbookLimit, Seats: fa.Seats, Refundable: fa.Refundable, RefundCutoff: fa.RefundCutoff, Buckets: fa.Buckets}
		if nf.Currency == "" {
			nf.Currency = "VND"
		}
		if nf.Capacity == 0 {
			nf.Capacity = len(fa.Seats)
		}
		if nf.Seats == nil {
			nf.Seats = []string{}
		}
		w.Fares = append(w.Fares, nf)
	}
	return w
}

// CreateFlight creates f as an admin: POST /admin/flights → 201, the
// flight with its fares' counters.
func (c Client) CreateFlight(t testing.TB, f Flight) httpapi.FlightView {
	t.Helper()
	v, p := c.TryCreateFlight(t, f)
	return must(t, v, p, "create flight %s", f.Code)
}

// TryCreateFlight is CreateFlight answering the problem of a refusal.
func (c Client) TryCreateFlight(t testing.TB, f Flight) (httpapi.FlightView, *Problem) {
	t.Helper()
	var v httpapi.FlightView
	return v, c.call(t, http.MethodPost, "/admin/flights", nil, f.wire(), http.StatusCreated, &v)
}

// GetFlight reads flight id: GET /flights/{id} → 200.
func (c Client) GetFlight(t testing.TB, id int64) httpapi.FlightView {
	t.Helper()
	var v httpapi.FlightView
	if p := c.call(t, http.MethodGet, fmt.Sprintf("/flights/%d", id), nil, nil, http.StatusOK, &v); p != nil {
		t.Fatalf("get flight %d: %s", id, p)
	}
	return v
}

// SearchFlights searches flights: GET /flights?query (e.g.
// "from=SGN&to=HAN&date=2026-12-05") → 200.
func (c Client) SearchFlights(t testing.TB, query string) []httpapi.FlightView {
	t.Helper()
	var out struct {
		Flights []httpapi.FlightView `json:"flights"`
	}
	if p := c.call(t, http.MethodGet, "/flights?"+query, nil, nil, http.StatusOK, &out); p != nil {
		t.Fatalf("search flights %s: %s", query, p)
	}
	return out.Flights
}

// SetOverbookLimit changes a fare's overbooking limit as an admin:
// PATCH /admin/flights/{id}/fares/{fareClass} → 200, the fare with its
// counters.
func (c Client) SetOverbookLimit(t testing.TB, flightID int64, class string, limit int) httpapi.FareView {
	t.Helper()
	var v httpapi.FareView
	body := struct {
		OverbookLimit int `json:"overbookLimit"`
	}{limit}
	if p := c.call(t, http.MethodPatch, fmt.Sprintf("/admin/flights/%d/fares/%s", flightID, class), nil, body, http.StatusOK, &v); p != nil {
		t.Fatalf("overbook limit %d on flight %d %s: %s", limit, flightID, class, p)
	}
	return v
}

// FlightRoom is the answer of PATCH /admin/flights/{id}: the flight and
// its waiting room.
type FlightRoom struct {
	httpapi.FlightView
	WaitingRoom guard.RoomView `json:"waitingRoom"`
}

// SetWaitingRoom switches flightID's waiting room as an admin, admitting
// perSecond (0: leave the rate as it is): PATCH /admin/flights/{id} → 200.
func (c Client) SetWaitingRoom(t testing.TB, flightID int64, enabled bool, perSecond int) FlightRoom {
	t.Helper()
	type room struct {
		Enabled        bool `json:"enabled"`
		AdmitPerSecond int  `json:"admitPerSecond,omitempty"`
	}
	body := struct {
		WaitingRoom room `json:"waitingRoom"`
	}{room{enabled, perSecond}}
	var v FlightRoom
	if p := c.call(t, http.MethodPatch, fmt.Sprintf("/admin/flights/%d", flightID), nil, body, http.StatusOK, &v); p != nil {
		t.Fatalf("waiting room of flight %d enabled=%t %d/s: %s", flightID, enabled, perSecond, p)
	}
	return v
}

// RoomStatus is the answer of GET /waiting-room/{ticket}: the position,
// or the admission token once admitted.
type RoomStatus struct {
	Position  int       `json:"position"`
	Admitted  bool      `json:"admitted"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// WaitingRoom asks where ticket stands: GET /waiting-room/{ticket} → 200.
func (c Client) WaitingRoom(t testing.TB, ticket string) RoomStatus {
	t.Helper()
	var st RoomStatus
	if p := c.call(t, http.MethodGet, "/waiting-room/"+ticket, nil, nil, http.StatusOK, &st); p != nil {
		t.Fatalf("waiting room ticket %s: %s", ticket, p)
	}
	return st
}

// WithRoomToken returns c sending token as its Waiting-Room-Token on
// holds, as a customer admitted by the waiting room does.
func (c Client) WithRoomToken(token string) Client {
	c.RoomToken = token
	return c
}

// JoinWaitlist puts the caller on flightID's waitlist for n seats of
// class: POST /flights/{id}/waitlist → 201.
func (c Client) JoinWaitlist(t testing.TB, flightID int64, class string, n int) httpapi.WaitView {
	t.Helper()
	v, p := c.TryJoinWaitlist(t, flightID, class, n)
	return must(t, v, p, "join the waitlist of flight %d for %d %s", flightID, n, class)
}

// TryJoinWaitlist is JoinWaitlist answering the problem of a refusal.
func (c Client) TryJoinWaitlist(t testing.TB, flightID int64, class string, n int) (httpapi.WaitView, *Problem) {
	t.Helper()
	body := struct {
		FareClass string `json:"fareClass"`
		Quantity  int    `json:"quantity"`
	}{class, n}
	var v httpapi.WaitView
	return v, c.call(t, http.MethodPost, fmt.Sprintf("/flights/%d/waitlist", flightID), nil, body, http.StatusCreated, &v)
}

// Waitlist lists the caller's waitlist entries: GET /waitlist → 200.
func (c Client) Waitlist(t testing.TB) []httpapi.WaitView {
	t.Helper()
	var out struct {
		Waitlist []httpapi.WaitView `json:"waitlist"`
	}
	if p := c.call(t, http.MethodGet, "/waitlist", nil, nil, http.StatusOK, &out); p != nil {
		t.Fatalf("GET /waitlist: %s", p)
	}
	return out.Waitlist
}

// LeaveWaitlist leaves waitlist entry id: DELETE /waitlist/{id} → 200.
func (c Client) LeaveWaitlist(t testing.TB, id int64) httpapi.WaitView {
	t.Helper()
	v, p := c.TryLeaveWaitlist(t, id)
	return must(t, v, p, "leave waitlist entry %d", id)
}

// TryLeaveWaitlist is LeaveWaitlist answering the problem of a refusal.
func (c Client) TryLeaveWaitlist(t testing.TB, id int64) (httpapi.WaitView, *Problem) {
	t.Helper()
	var v httpapi.WaitView
	return v, c.call(t, http.MethodDelete, fmt.Sprintf("/waitlist/%d", id), nil, nil, http.StatusOK, &v)
}

// Car is the body of POST /host/cars.
type Car = httpapi.CreateCarRequest

// CreateCar lists car as a host (or an admin): POST /host/cars → 201, the
// car with its plate and host.
func (c Client) CreateCar(t testing.TB, car Car) httpapi.CarView {
	t.Helper()
	v, p := c.TryCreateCar(t, car)
	return must(t, v, p, "list car %s", car.Plate)
}

// TryCreateCar is CreateCar answering the problem of a refusal.
func (c Client) TryCreateCar(t testing.TB, car Car) (httpapi.CarView, *Problem) {
	t.Helper()
	var v httpapi.CarView
	return v, c.call(t, http.MethodPost, "/host/cars", nil, car, http.StatusCreated, &v)
}

// CarPage is a page of cars: GET /cars and GET /host/cars.
type CarPage struct {
	Cars      []httpapi.CarView `json:"cars"`
	NextAfter int64             `json:"nextAfter"`
}

// SearchCars searches cars: GET /cars?query (e.g. "city=HN&from=…&to=…")
// → 200.
func (c Client) SearchCars(t testing.TB, query string) CarPage {
	t.Helper()
	return c.cars(t, "/cars?"+query)
}

// HostCars lists the caller's cars (an admin's: all): GET /host/cars
// with query ("" for none) → 200.
func (c Client) HostCars(t testing.TB, query string) CarPage {
	t.Helper()
	path := "/host/cars"
	if query != "" {
		path += "?" + query
	}
	return c.cars(t, path)
}

func (c Client) cars(t testing.TB, path string) CarPage {
	t.Helper()
	var out CarPage
	if p := c.call(t, http.MethodGet, path, nil, nil, http.StatusOK, &out); p != nil {
		t.Fatalf("GET %s: %s", path, p)
	}
	return out
}
