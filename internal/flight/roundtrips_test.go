package flight_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/flight"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// tripCounter counts round trips: each statement sent on its own, and each
// pipelined batch once.
type tripCounter struct{ n atomic.Int64 }

type inBatchKey struct{}

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if ctx.Value(inBatchKey{}) == nil {
		c.n.Add(1)
	}
	return ctx
}
func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return context.WithValue(ctx, inBatchKey{}, true)
}
func (c *tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestUncontendedHoldRoundTrips: a hold nobody competes with costs one
// round trip — one statement, hold_flight, in autocommit — and a quantity
// hold the same; so does a coalesced batch of many. The other hold tests
// check what the function decides.
func TestUncontendedHoldRoundTrips(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	counter := &tripCounter{}
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
		counter.n.Store(0)
		b, err := svc.Hold(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if n := counter.n.Load(); n != 1 {
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
