package payment_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paytest"
	"berth.dev/berth/internal/pg/pgtest"
)

// Two `berth serve` processes on one database: the same Idempotency-Key
// sent to both at once holds once, and twenty copies of one webhook split
// between them confirm once. Nothing that decides lives in a process.
func TestTwoProcessesShareKeysAndWebhooks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs berth")
	}
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	a := apptest.StartProcess(t, dbURL, "BERTH_DB_MAX_CONNS=8")
	b := apptest.StartProcess(t, dbURL, "BERTH_DB_MAX_CONNS=8")
	pool := pgtest.Open(t, dbURL)
	now := time.Now()
	flightID := apptest.CreateFlight(t, a.URL, apptest.Token(t, "admin", 1, now), now.Add(72*time.Hour),
		apptest.Fare{Class: "ECONOMY", Price: price, Seats: apptest.Seats(1, 2, "AB")})
	tok := apptest.Token(t, "customer", 9, now)

	// Raw answers: every process must give the one answer byte for byte.
	holds := apptest.Race(10, func(i int) *apptest.Response {
		base := []string{a.URL, b.URL}[i%2]
		return apptest.Do(t, base, apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: tok,
			Body:   map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "seats": []string{"1A"}},
			Header: map[string]string{"Idempotency-Key": "two-processes"}})
	})
	var body string
	for _, r := range holds {
		switch {
		case r.Status == http.StatusCreated && (body == "" || body == string(r.Body)):
			body = string(r.Body)
		case r.Status == http.StatusConflict && r.Code() == "idempotency_key_in_use":
		default:
			t.Errorf("hold: %d %s", r.Status, r.Body)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM booking`); n != 1 || body == "" {
		t.Fatalf("%d bookings (first answer %q), want 1", n, body)
	}
	var id int64
	if err := pool.QueryRow(context.Background(), `SELECT id FROM booking`).Scan(&id); err != nil {
		t.Fatal(err)
	}

	d := paytest.Charge(t, pool, id)
	rs := apptest.Race(20, func(i int) *apptest.Response {
		return paytest.Send(t, []string{a.URL, b.URL}[i%2], time.Now(), payment.ChargeSucceeded, d)
	})
	for i, r := range rs {
		if r.Status != http.StatusOK {
			t.Errorf("delivery %d: %d %s", i, r.Status, r.Body)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM payment`); n != 1 {
		t.Errorf("%d payments, want 1", n)
	}
	if n := events(t, pool, id, outbox.BookingConfirmed); n != 1 {
		t.Errorf("%d booking.confirmed events, want 1", n)
	}
	if b := getBooking(t, pool, id); b.Status != "CONFIRMED" {
		t.Errorf("booking %s, want CONFIRMED", b.Status)
	}
}
