package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/booking"
)

func holdWithKey(s *apptest.Server, customer int64, key string, body any) *apptest.Response {
	return s.Do(apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: s.Token("customer", customer), Body: body,
		Header: map[string]string{"Idempotency-Key": key}})
}

// seats is a raw body: these tests are about the wire, a repeat's status,
// body and headers replayed byte for byte.
func seats(flightID int64, s ...string) map[string]any {
	return map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": s}
}

func bookings(t *testing.T, s *apptest.Server) int {
	t.Helper()
	var n int
	if err := s.App.Pool.QueryRow(context.Background(), `SELECT count(*) FROM booking`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// POST /bookings with an Idempotency-Key: a repeat gets the first answer
// (status, body, Location) and holds nothing more; a different body or path
// under the key is 422; another customer's identical key is its own.
func TestIdempotentHold(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(1, 3, "AB")})

	first := holdWithKey(s, 1, "trip-1", seats(flightID, "1A"))
	if first.Status != http.StatusCreated {
		t.Fatalf("hold: %d %s", first.Status, first.Body)
	}
	again := holdWithKey(s, 1, "trip-1", seats(flightID, "1A"))
	if again.Status != first.Status || string(again.Body) != string(first.Body) ||
		again.Header.Get("Location") != first.Header.Get("Location") || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("repeat: %d %s Location %q, want the first answer %d %s %q replayed", again.Status, again.Body,
			again.Header.Get("Location"), first.Status, first.Body, first.Header.Get("Location"))
	}
	if n := bookings(t, s); n != 1 {
		t.Errorf("%d bookings, want 1", n)
	}

	if r := holdWithKey(s, 1, "trip-1", seats(flightID, "1B")); r.Status != http.StatusUnprocessableEntity || r.Code() != "idempotency_key_reused" {
		t.Errorf("same key, other body: %d %s, want 422 idempotency_key_reused", r.Status, r.Body)
	}
	var held booking.View
	first.JSON(t, &held)
	id := held.BookingID
	r := s.Do(apptest.Request{Method: http.MethodPost, Path: fmt.Sprintf("/bookings/%d/payments", id), Token: s.Token("customer", 1),
		Header: map[string]string{"Idempotency-Key": "trip-1"}})
	if r.Status != http.StatusUnprocessableEntity || r.Code() != "idempotency_key_reused" {
		t.Errorf("same key, other path: %d %s, want 422 idempotency_key_reused", r.Status, r.Body)
	}

	other := holdWithKey(s, 2, "trip-1", seats(flightID, "2A"))
	var theirs booking.View
	if other.Status == http.StatusCreated {
		other.JSON(t, &theirs)
	}
	if other.Status != http.StatusCreated || theirs.CustomerID != 2 {
		t.Errorf("another customer's same key: %d %s, want their own 201", other.Status, other.Body)
	}
	if r := holdWithKey(s, 2, "trip-1", seats(flightID, "1A")); r.Code() != "idempotency_key_reused" {
		t.Errorf("the other customer's key now belongs to their request: %d %s", r.Status, r.Body)
	}
	if n := bookings(t, s); n != 2 {
		t.Errorf("%d bookings, want 2", n)
	}

	// Without a key a flight hold works as before.
	if r := s.Do(apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: s.Token("customer", 3),
		Body: seats(flightID, "3A")}); r.Status != http.StatusCreated {
		t.Errorf("hold without a key: %d %s", r.Status, r.Body)
	}
	// Malformed keys are refused and hold nothing.
	for _, key := range []string{"", strings.Repeat("x", 256)} {
		if r := holdWithKey(s, 4, key, seats(flightID, "3B")); r.Status != http.StatusBadRequest || r.Code() != "invalid_request" {
			t.Errorf("key of %d bytes: %d %s, want 400 invalid_request", len(key), r.Status, r.Body)
		}
	}
	if n := bookings(t, s); n != 3 {
		t.Errorf("%d bookings, want 3", n)
	}

	// After 24 hours the key is free again.
	s.Clock.Advance(24 * time.Hour)
	if r := holdWithKey(s, 1, "trip-1", seats(flightID, "1B")); r.Status != http.StatusCreated {
		t.Errorf("key reused after 24h: %d %s, want 201", r.Status, r.Body)
	}
}

// The same key sent twenty times at once holds once: every answer is the
// one hold (201, identical) or 409 idempotency_key_in_use, never a 500.
func TestIdempotentHoldConcurrent(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(1, 3, "AB")})
	const n = 20
	rs := apptest.Race(n, func(int) *apptest.Response { return holdWithKey(s, 9, "same", seats(flightID, "2B")) })
	var body string
	created, inUse := 0, 0
	for _, r := range rs {
		switch {
		case r.Status == http.StatusCreated:
			created++
			if body == "" {
				body = string(r.Body)
			} else if string(r.Body) != body {
				t.Errorf("two different 201 answers: %s and %s", body, r.Body)
			}
		case r.Status == http.StatusConflict && r.Code() == "idempotency_key_in_use":
			inUse++
		default:
			t.Errorf("answer %d %s", r.Status, r.Body)
		}
	}
	if created == 0 || created+inUse != n {
		t.Errorf("%d created, %d in use of %d", created, inUse, n)
	}
	if got := bookings(t, s); got != 1 {
		t.Errorf("%d bookings, want 1", got)
	}
	// Afterwards, the stored answer.
	if r := holdWithKey(s, 9, "same", seats(flightID, "2B")); r.Status != http.StatusCreated || string(r.Body) != body {
		t.Errorf("after: %d %s, want %s", r.Status, r.Body, body)
	}
}

// A hold whose answer was not stored (the process died, or the database
// went away, between the commit and the settle) is never run again under
// its key: a retry is answered from the booking it made at once, while the
// dead request's lease still runs (its hold's deadline runs too), then from
// the answer that stored; no second booking is held.
func TestIdempotentHoldAnswerLost(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(1, 3, "AB")})
	body := map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "quantity": 1}
	first := holdWithKey(s, 5, "lost", body)
	if first.Status != http.StatusCreated {
		t.Fatalf("hold: %d %s", first.Status, first.Body)
	}
	// What a settle that failed after the commit leaves: the key leased,
	// without an answer.
	if _, err := s.App.Pool.Exec(context.Background(), `UPDATE idempotency_key
		SET response_status = NULL, response_headers = NULL, response_body = NULL,
			lease = gen_random_uuid(), locked_until = $1
		WHERE caller_id = 5 AND idem_key = 'lost'`, s.Clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, when := range []string{"during the lease, from the booking", "again, from the stored answer"} {
		r := holdWithKey(s, 5, "lost", body)
		if r.Status != http.StatusCreated || r.Map(t)["bookingId"] != first.Map(t)["bookingId"] ||
			r.Header.Get("Location") != first.Header.Get("Location") || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry %s: %d %s Location %q, want the first booking %s replayed",
				when, r.Status, r.Body, r.Header.Get("Location"), first.Body)
		}
	}
	if n := bookings(t, s); n != 1 {
		t.Errorf("%d bookings, want 1: the hold ran again", n)
	}
}
