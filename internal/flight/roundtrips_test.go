package flight_test

import (
	"context"
	"testing"
	"time"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/flight"
	"berth.dev/berth/internal/idempotency"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// TestUncontendedHoldRoundTrips: a hold nobody competes with costs one
// round trip — one statement, hold_flight, in autocommit — and a quantity
// hold the same; so does a coalesced batch of many, and a hold under a new
// Idempotency-Key, whose claim is pipelined with it. The other hold tests
// check what the function decides.
func TestUncontendedHoldRoundTrips(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	counter := &pgtest.RoundTrips{}
	pool, err := pg.Open(context.Background(), url, pg.PoolConfig{MaxConns: 2, Tracer: counter})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	id := benchFlight(t, pool, 10, "ABCDEF", 60)
	svc := flight.NewService(pool, clock.System{}, flight.Config{HoldTTL: 10 * time.Minute, SeatMapTTL: time.Second})
	for _, r := range []flight.HoldRequest{
		{CustomerID: 1, FlightID: id, FareClass: "ECONOMY", Seats: []string{"3C", "3B"}},
		{CustomerID: 2, FlightID: id, FareClass: "ECONOMY", Quantity: 2},
	} {
		before := counter.Len()
		b, err := svc.Hold(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if n := counter.Len() - before; n != 1 {
			t.Errorf("hold %v (booking %d): %d round trips, want 1", r, b.ID, n)
		}
	}
	// Under a new Idempotency-Key, the key's claim goes in the same round
	// trip and commit, and the booking is recorded as its effect.
	q := idempotency.NewRequest(3, "new-key", "POST", "/bookings", []byte(`{}`))
	claim := idempotency.Pending(q)
	before := counter.Len()
	b, err := svc.Hold(pg.WithKeyClaim(context.Background(), claim),
		flight.HoldRequest{CustomerID: 3, FlightID: id, FareClass: "ECONOMY", Quantity: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := counter.Len() - before; n != 1 {
		t.Errorf("a hold under a new key: %d round trips, want 1", n)
	}
	var effect, lease string
	if err := pool.QueryRow(context.Background(), `SELECT effect, lease::text FROM idempotency_key
		WHERE caller_id = 3 AND idem_key = 'new-key'`).Scan(&effect, &lease); err != nil {
		t.Fatal(err)
	}
	if effect != booking.EffectOf(b.ID) || lease != claim.Lease {
		t.Errorf("the key's effect %q and lease %s, want %q and %s", effect, lease, booking.EffectOf(b.ID), claim.Lease)
	}
	var held, seats int
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT held FROM fare_bucket WHERE flight_id = $1),
		(SELECT count(*) FROM seat s JOIN booking b ON b.id = s.booking_id WHERE s.flight_id = $1 AND s.status = 'HELD' AND b.customer_id = 1)`, id).Scan(&held, &seats); err != nil {
		t.Fatal(err)
	}
	if held != 5 || seats != 2 {
		t.Errorf("held %d units (want 5) and %d seats of the seat hold's booking (want 2)", held, seats)
	}
}
