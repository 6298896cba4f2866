package flight_test

import (
	"context"
	"testing"
	"time"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/flight"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// TestUncontendedHoldRoundTrips: a hold nobody competes with costs one
// round trip — one statement, hold_flight, in autocommit — and a quantity
// hold the same; so does a coalesced batch of many. The other hold tests
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
	var held, seats int
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT held FROM fare_bucket WHERE flight_id = $1),
		(SELECT count(*) FROM seat s JOIN booking b ON b.id = s.booking_id WHERE s.flight_id = $1 AND s.status = 'HELD' AND b.customer_id = 1)`, id).Scan(&held, &seats); err != nil {
		t.Fatal(err)
	}
	if held != 4 || seats != 2 {
		t.Errorf("held %d units (want 4) and %d seats of the seat hold's booking (want 2)", held, seats)
	}
}
