package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"berth.dev/berth/internal/app/apptest"
)

// state is what a bad request must not change.
type state struct {
	bookings, outbox, takenSeats, sold, held, flights int
}

func snapshot(t *testing.T, s *apptest.Server) state {
	t.Helper()
	var st state
	err := s.App.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM booking), (SELECT count(*) FROM outbox),
		(SELECT count(*) FROM seat WHERE status <> 'AVAILABLE'),
		(SELECT coalesce(sum(sold), 0) FROM fare_bucket), (SELECT coalesce(sum(held), 0) FROM fare_bucket),
		(SELECT count(*) FROM flight)`).Scan(&st.bookings, &st.outbox, &st.takenSeats, &st.sold, &st.held, &st.flights)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t,
		apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 12, "ABCDEF")},
		apptest.Fare{Class: "BUSINESS", Price: 5000, Seats: apptest.Seats(1, 1, "AB")})
	alice, bob := s.Token("customer", 1), s.Token("customer", 2)
	admin, host := s.Token("admin", 99), s.Token("host", 50)
	own := apptest.Client{Base: s.URL, Token: alice}.HoldSeats(t, flightID, "ECONOMY", "10A")
	aliceBooking := fmt.Sprintf("/bookings/%d", own.BookingID)

	// A token signed with another key, and one that has expired.
	forged, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "1", "role": "admin",
		"exp": apptest.Epoch.Add(time.Hour).Unix()}).SignedString([]byte("not-the-secret-at-all"))
	expired := apptest.Token(t, "customer", 1, apptest.Epoch.Add(-48*time.Hour))

	book := func(body any) apptest.Request {
		return apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: alice, Body: body}
	}
	flightBody := func(mut func(m map[string]any)) map[string]any {
		m := map[string]any{"code": "VN777", "from": "SGN", "to": "HAN",
			"departureAt": "2026-12-20T08:00:00+07:00", "arrivalAt": "2026-12-20T10:05:00+07:00",
			"fares": []map[string]any{{"fareClass": "ECONOMY", "price": 1, "currency": "VND", "capacity": 1, "seats": []string{"1A"}}}}
		mut(m)
		return m
	}
	tests := []struct {
		name   string
		req    apptest.Request
		status int
		code   string
		field  string
	}{
		{"malformed JSON", book(`{"flightId": 1,`), 400, "invalid_request", ""},
		{"not JSON", book(`flightId=1`), 400, "invalid_request", ""},
		{"two JSON values", book(`{} {}`), 400, "invalid_request", ""},
		{"empty body", book(``), 400, "invalid_request", ""},
		{"unknown field", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": []string{"11A"}, "customerId": 7}), 400, "invalid_request", ""},
		{"amount from the client", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": []string{"11A"}, "amount": 1}), 400, "invalid_request", ""},
		{"wrong type", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": "11A"}), 400, "invalid_request", "seats"},
		{"a key in the wrong case", book(fmt.Sprintf(`{"flightId": 999999, "FlightId": %d, "fareClass": "ECONOMY", "seats": ["11A"]}`, flightID)), 400, "invalid_request", "FlightId"},
		{"a key twice", book(fmt.Sprintf(`{"flightId": 999999, "flightId": %d, "fareClass": "ECONOMY", "seats": ["11A"]}`, flightID)), 400, "invalid_request", "flightId"},
		{"a nested key in the wrong case", apptest.Request{Method: http.MethodPost, Path: "/admin/flights", Token: admin, Body: strings.Replace(
			`{"code": "VN778", "from": "SGN", "to": "HAN", "departureAt": "2026-12-20T08:00:00+07:00", "arrivalAt": "2026-12-20T10:05:00+07:00",
			"fares": [{"fareClass": "ECONOMY", "price": 1, "currency": "VND", "capacity": 1, "seats": ["1A"]}]}`, `"price"`, `"Price"`, 1)}, 400, "invalid_request", "Price"},
		{"not UTF-8", book("{\"flightId\": 1, \"fareClass\": \"ECO\xffNOMY\", \"seats\": [\"11A\"]}"), 400, "invalid_request", ""},
		{"currency not in ISO 4217", apptest.Request{Method: http.MethodPost, Path: "/admin/flights", Token: admin, Body: flightBody(func(m map[string]any) {
			m["fares"] = []map[string]any{{"fareClass": "ECONOMY", "price": 1, "currency": "XYZ", "capacity": 1, "seats": []string{"1A"}}}
		})}, 422, "validation_failed", "fares[0].currency"},
		{"nested past encoding/json's depth", book(`{"flightId": 1, "seats": ` + strings.Repeat("[", 10_001) + strings.Repeat("]", 10_001) + `}`), 400, "invalid_request", ""},
		{"body over 64 KiB", book(`{"flightId": 1, "fareClass": "` + strings.Repeat("E", 70<<10) + `"}`), 413, "body_too_large", ""},
		{"no flight id", book(map[string]any{"fareClass": "ECONOMY", "seats": []string{"11A"}}), 422, "validation_failed", "flightId"},
		{"unknown flight", book(map[string]any{"flightId": flightID + 1000, "fareClass": "ECONOMY", "seats": []string{"11A"}}), 422, "validation_failed", "flightId"},
		{"unknown fare class", book(map[string]any{"flightId": flightID, "fareClass": "FIRST", "seats": []string{"11A"}}), 422, "validation_failed", "fareClass"},
		{"lower-case fare class", book(map[string]any{"flightId": flightID, "fareClass": "economy", "seats": []string{"11A"}}), 422, "validation_failed", "fareClass"},
		{"empty seat list", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": []string{}}), 422, "validation_failed", "seats"},
		{"duplicate seats", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": []string{"11A", "11B", "11A"}}), 422, "validation_failed", "seats[2]"},
		{"ten seats", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": apptest.Seats(11, 12, "ABCDE")}), 422, "validation_failed", "seats"},
		{"not a seat number", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": []string{"11a"}}), 422, "validation_failed", "seats[0]"},
		{"unknown seat", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": []string{"11B", "99A"}}), 422, "validation_failed", "seats"},
		{"seat of another class", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": []string{"11B", "1A"}}), 422, "validation_failed", "seats"},
		{"quantity zero", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "quantity": 0}), 422, "validation_failed", "quantity"},
		{"quantity negative", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "quantity": -2}), 422, "validation_failed", "quantity"},
		{"quantity ten", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "quantity": 10}), 422, "validation_failed", "quantity"},
		{"quantity and seats", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "quantity": 1, "seats": []string{"11A"}}), 422, "validation_failed", "quantity"},
		{"neither seats nor quantity", book(map[string]any{"flightId": flightID, "fareClass": "ECONOMY"}), 422, "validation_failed", "seats"},
		{"no token", apptest.Request{Method: http.MethodPost, Path: "/bookings", Body: map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": []string{"11A"}}}, 401, "unauthenticated", ""},
		{"forged token", apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: forged, Body: map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": []string{"11A"}}}, 401, "unauthenticated", ""},
		{"expired token", apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: expired, Body: map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": []string{"11A"}}}, 401, "unauthenticated", ""},
		{"basic auth", apptest.Request{Method: http.MethodGet, Path: "/bookings", Header: map[string]string{"Authorization": "Basic YWxpY2U6eA=="}}, 401, "unauthenticated", ""},
		{"host holding seats", apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: host, Body: map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": []string{"11A"}}}, 403, "forbidden", ""},
		{"another customer's booking", apptest.Request{Method: http.MethodGet, Path: aliceBooking, Token: bob}, 404, "not_found", ""},
		{"cancel another customer's booking", apptest.Request{Method: http.MethodDelete, Path: aliceBooking, Token: bob}, 404, "not_found", ""},
		{"a host is not the customer's host", apptest.Request{Method: http.MethodPost, Path: aliceBooking + "/cancel", Token: host}, 404, "not_found", ""},
		{"unknown booking", apptest.Request{Method: http.MethodGet, Path: "/bookings/987654", Token: alice}, 404, "not_found", ""},
		{"non-numeric booking id", apptest.Request{Method: http.MethodGet, Path: "/bookings/abc", Token: alice}, 404, "not_found", ""},
		{"booking id with a leading zero", apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/bookings/0%d", own.BookingID), Token: alice}, 404, "not_found", ""},
		{"booking id with a sign", apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/bookings/+%d", own.BookingID), Token: alice}, 404, "not_found", ""},
		{"a bad escape in the query", apptest.Request{Method: http.MethodGet, Path: "/bookings?limit=%zz", Token: alice}, 400, "invalid_request", ""},
		{"a bad escape in a search", apptest.Request{Method: http.MethodGet, Path: "/flights?from=SGN&to=HAN&date=%zz"}, 400, "invalid_request", ""},
		{"a query parameter twice", apptest.Request{Method: http.MethodGet, Path: "/flights?from=SGN&to=HAN&from=DAD"}, 400, "invalid_request", ""},
		{"a query parameter twice, once empty", apptest.Request{Method: http.MethodGet, Path: "/bookings?limit=5&limit=", Token: alice}, 400, "invalid_request", ""},
		{"malformed body on a bodiless route", apptest.Request{Method: http.MethodPost, Path: aliceBooking + "/extend", Token: alice, Body: `{not json`}, 400, "invalid_request", ""},
		{"a field on a bodiless route", apptest.Request{Method: http.MethodPost, Path: aliceBooking + "/cancel", Token: alice, Body: `{"reason": "changed my mind"}`}, 400, "invalid_request", ""},
		{"a body on a payment start", apptest.Request{Method: http.MethodPost, Path: aliceBooking + "/payments", Token: alice,
			Header: map[string]string{"Idempotency-Key": "k-body"}, Body: `{"amount": 1, "currency": "USD"}`}, 400, "invalid_request", ""},
		{"waitlist of an unknown flight", apptest.Request{Method: http.MethodPost, Path: fmt.Sprintf("/flights/%d/waitlist", flightID+1000), Token: alice,
			Body: map[string]any{"fareClass": "ECONOMY", "quantity": 1}}, 404, "not_found", ""},
		{"unknown flight seat map", apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/flights/%d/seats", flightID+1000)}, 404, "not_found", ""},
		{"unknown route", apptest.Request{Method: http.MethodGet, Path: "/nowhere"}, 404, "not_found", ""},
		{"wrong method", apptest.Request{Method: http.MethodPut, Path: "/bookings", Token: alice}, 405, "method_not_allowed", ""},
		{"search with an empty date", apptest.Request{Method: http.MethodGet, Path: "/flights?from=SGN&to=HAN&date="}, 422, "validation_failed", "date"},
		{"search with a bad airport", apptest.Request{Method: http.MethodGet, Path: "/flights?from=SG&to=HAN&date=2026-12-03"}, 422, "validation_failed", "from"},
		{"search in the past", apptest.Request{Method: http.MethodGet, Path: "/flights?from=SGN&to=HAN&date=2020-01-01"}, 422, "validation_failed", "date"},
		// At 09:00 UTC on 1 December it is still 30 November at UTC-12, and no longer 29 November anywhere.
		{"search a day over everywhere", apptest.Request{Method: http.MethodGet, Path: "/flights?from=SGN&to=HAN&date=2026-11-29"}, 422, "validation_failed", "date"},
		{"bookings limit over 100", apptest.Request{Method: http.MethodGet, Path: "/bookings?limit=101", Token: alice}, 422, "validation_failed", "limit"},
		{"customer creating a flight", apptest.Request{Method: http.MethodPost, Path: "/admin/flights", Token: alice, Body: flightBody(func(map[string]any) {})}, 403, "forbidden", ""},
		{"timestamp without offset", apptest.Request{Method: http.MethodPost, Path: "/admin/flights", Token: admin, Body: flightBody(func(m map[string]any) { m["departureAt"] = "2026-12-20T08:00:00" })}, 422, "validation_failed", "departureAt"},
		{"departure in the past", apptest.Request{Method: http.MethodPost, Path: "/admin/flights", Token: admin, Body: flightBody(func(m map[string]any) {
			m["departureAt"], m["arrivalAt"] = "2026-11-20T08:00:00+07:00", "2026-11-20T10:00:00+07:00"
		})}, 422, "validation_failed", "departureAt"},
		{"departure past the schedule, in year 9999", apptest.Request{Method: http.MethodPost, Path: "/admin/flights", Token: admin, Body: flightBody(func(m map[string]any) {
			m["departureAt"], m["arrivalAt"] = "9999-12-31T23:59:59+07:00", "9999-12-31T23:59:59-14:00"
		})}, 422, "validation_failed", "departureAt"},
		{"arrival before departure", apptest.Request{Method: http.MethodPost, Path: "/admin/flights", Token: admin, Body: flightBody(func(m map[string]any) { m["arrivalAt"] = "2026-12-20T07:00:00+07:00" })}, 422, "validation_failed", "arrivalAt"},
		{"unknown airport", apptest.Request{Method: http.MethodPost, Path: "/admin/flights", Token: admin, Body: flightBody(func(m map[string]any) { m["to"] = "XXX" })}, 422, "validation_failed", "from"},
		{"same airport twice", apptest.Request{Method: http.MethodPost, Path: "/admin/flights", Token: admin, Body: flightBody(func(m map[string]any) { m["to"] = "SGN" })}, 422, "validation_failed", "to"},
		{"seats over capacity", apptest.Request{Method: http.MethodPost, Path: "/admin/flights", Token: admin, Body: flightBody(func(m map[string]any) {
			m["fares"] = []map[string]any{{"fareClass": "ECONOMY", "price": 1, "currency": "VND", "capacity": 1, "seats": []string{"1A", "1B"}}}
		})}, 422, "validation_failed", "fares[0].seats"},
		{"negative overbooking", apptest.Request{Method: http.MethodPatch, Path: fmt.Sprintf("/admin/flights/%d/fares/ECONOMY", flightID), Token: admin, Body: map[string]any{"overbookLimit": -1}}, 422, "validation_failed", "overbookLimit"},
		{"overbooking of an unknown class", apptest.Request{Method: http.MethodPatch, Path: fmt.Sprintf("/admin/flights/%d/fares/FIRST", flightID), Token: admin, Body: map[string]any{"overbookLimit": 1}}, 404, "not_found", ""},
	}
	before := snapshot(t, s)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.Do(tt.req)
			if r.Status != tt.status || r.Code() != tt.code {
				t.Fatalf("%d %s, want %d %s", r.Status, r.Body, tt.status, tt.code)
			}
			if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q, want application/problem+json", ct)
			}
			m := r.Map(t)
			if m["type"] != "https://berth.dev/problems/"+tt.code || m["status"] != float64(tt.status) || m["title"] == "" {
				t.Errorf("not an RFC 9457 problem for %s: %s", tt.code, r.Body)
			}
			if tt.field != "" && m["field"] != tt.field {
				t.Errorf("field = %v, want %s (detail %q)", m["field"], tt.field, m["detail"])
			}
			if after := snapshot(t, s); after != before {
				t.Errorf("the database changed: %+v → %+v", before, after)
			}
		})
	}
}

// A route that acts on its path alone refuses a body (above), but the
// empty forms a client may send, nothing, blanks, {} and null, are no body.
func TestBodilessRoutesTakeEmptyForms(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 10, "ABCD")})
	for i, body := range []string{"", " \n", "{}", "null"} {
		token := s.Token("customer", int64(i+1))
		b := apptest.Client{Base: s.URL, Token: token}.HoldSeats(t, flightID, "ECONOMY", fmt.Sprintf("10%c", 'A'+i))
		path := fmt.Sprintf("/bookings/%d", b.BookingID)
		if r := s.Do(apptest.Request{Method: http.MethodPost, Path: path + "/extend", Token: token, Body: body}); r.Status != http.StatusOK {
			t.Errorf("extend with body %q: %d %s, want 200", body, r.Status, r.Body)
		}
		if r := s.Do(apptest.Request{Method: http.MethodPost, Path: path + "/cancel", Token: token, Body: body}); r.Status != http.StatusOK ||
			r.Map(t)["status"] != "CANCELLED" {
			t.Errorf("cancel with body %q: %d %s, want 200 CANCELLED", body, r.Status, r.Body)
		}
	}
}

// Raising or lowering the overbooking limit is a controlled change: refused
// when what is sold and held would exceed the new quota.
func TestOverbookLimitIsControlled(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 2, OverbookLimit: 1})
	for i := range 3 {
		r := s.Do(apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: s.Token("customer", int64(i+1)),
			Body: map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "quantity": 1}})
		if r.Status != http.StatusCreated {
			t.Fatalf("hold %d: %d %s", i, r.Status, r.Body)
		}
	}
	patch := func(limit int) *apptest.Response {
		return s.Do(apptest.Request{Method: http.MethodPatch, Path: fmt.Sprintf("/admin/flights/%d/fares/ECONOMY", flightID),
			Token: s.Token("admin", 9), Body: map[string]any{"overbookLimit": limit}})
	}
	if r := patch(0); r.Status != http.StatusConflict || r.Code() != "invalid_state" {
		t.Fatalf("lower below held: %d %s, want 409 invalid_state", r.Status, r.Body)
	}
	r := patch(3)
	if r.Status != http.StatusOK || r.Map(t)["overbookLimit"] != float64(3) || r.Map(t)["available"] != float64(2) {
		t.Fatalf("raise to 3: %d %s", r.Status, r.Body)
	}
	if r := s.Do(apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: s.Token("customer", 9),
		Body: map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "quantity": 2}}); r.Status != http.StatusCreated {
		t.Fatalf("hold into the raised quota: %d %s", r.Status, r.Body)
	}
	if r := patch(2); r.Status != http.StatusConflict {
		t.Fatalf("lower below held again: %d %s, want 409", r.Status, r.Body)
	}
}
