package flight

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// Holds released at once for the last units of a class split over buckets:
// each decides on the buckets as committed, locks them last, and is sent
// back to lock them first when another took the room meanwhile. Exactly the
// class's units are held, every other hold is refused sold_out (never an
// error), and nothing is oversold; alone and coalesced.
func TestHoldsRaceForTheLastUnitsLockingBucketsLast(t *testing.T) {
	t.Parallel()
	for _, coalesce := range []bool{false, true} {
		t.Run(fmt.Sprintf("coalesce=%v", coalesce), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			svc := NewService(pool, clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute, Coalesce: coalesce, MaxBatch: 4})
			const capacity, buyers = 20, 60
			id := newTestFlight(t, svc, NewFare{Class: "ECONOMY", Price: 100, Capacity: capacity, Buckets: 4})
			start := make(chan struct{})
			errs := make([]error, buyers)
			var wg sync.WaitGroup
			for i := range buyers {
				wg.Go(func() {
					<-start
					_, errs[i] = svc.Hold(context.Background(), HoldRequest{CustomerID: int64(i + 1), FlightID: id, FareClass: "ECONOMY", Quantity: 1})
				})
			}
			close(start)
			wg.Wait()
			won := 0
			for i, err := range errs {
				switch {
				case err == nil:
					won++
				case !fault.Is(err, fault.SoldOut):
					t.Errorf("buyer %d: %v, want a hold or sold_out", i, err)
				}
			}
			if won != capacity {
				t.Errorf("%d holds, want %d", won, capacity)
			}
			var held, quota, over, bookings int
			if err := pool.QueryRow(context.Background(), `SELECT sum(held), sum(quota), count(*) FILTER (WHERE sold + held > quota),
				(SELECT count(*) FROM booking WHERE flight_id = $1)
				FROM fare_bucket WHERE flight_id = $1`, id).Scan(&held, &quota, &over, &bookings); err != nil {
				t.Fatal(err)
			}
			if held != capacity || quota != capacity || over != 0 || bookings != capacity {
				t.Errorf("held %d, quota %d, buckets over quota %d, bookings %d; want %d, %d, 0, %d",
					held, quota, over, bookings, capacity, capacity, capacity)
			}
		})
	}
}

// A hold writes its booking and event before it queues for the fare
// buckets, the hottest rows of a sale: waiting on them, it already holds
// the locks of its writes, so holds of one class wait for each other only
// for the counter update and the commit.
func TestHoldLocksTheBucketsLast(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	svc := NewService(pool, clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute})
	ctx := context.Background()
	id := newTestFlight(t, svc, NewFare{Class: "ECONOMY", Price: 100, Capacity: 10})
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	if _, err := other.Exec(ctx, `SELECT 1 FROM fare_bucket WHERE flight_id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := svc.Hold(ctx, HoldRequest{CustomerID: 1, FlightID: id, FareClass: "ECONOMY", Quantity: 1})
		done <- err
	}()
	if wrote := awaitLockWait(t, pool, done); !wrote {
		t.Error("the hold waits for the fare bucket before writing its booking and event")
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("hold after the bucket came free: %v", err)
	}
}

// A lone hold applies its units to the bucket it decided on with one
// conditional update; when that bucket filled while the hold waited for it,
// the hold is decided again with the class's buckets locked first, and gets
// its units in a bucket that has room, never more than a bucket's share.
func TestHoldWhoseBucketFilledGoesToOneWithRoom(t *testing.T) {
	t.Parallel()
	pool, svc, id := newTwoBucketFlight(t)
	ctx := context.Background()
	var b *booking.Booking
	err := whileBucketFills(t, pool, id, func() error {
		var err error
		b, err = svc.Hold(ctx, HoldRequest{CustomerID: 1, FlightID: id, FareClass: "ECONOMY", Quantity: 1})
		return err
	})
	if err != nil {
		t.Fatalf("hold: %v", err)
	}
	var bucket int
	if err := pool.QueryRow(ctx, `SELECT fare_bucket FROM booking WHERE id = $1`, b.ID).Scan(&bucket); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT bucket || ':' || quota || '/' || held FROM fare_bucket WHERE flight_id = $1 ORDER BY bucket`, id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"0:2/2", "1:2/1"}; bucket != 1 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("booking in bucket %d, buckets (quota/held) %v; want bucket 1, %v", bucket, got, want)
	}
}

// The step behind that: a lone hold's conditional update of its bucket,
// when the bucket filled while the update waited for it, applies nothing
// but leaves the row locked (PostgreSQL locks the newest version before
// it checks the condition again). hold_flight must not go on to lock the
// class's buckets in order from there, holding one out of order (two such
// holds deadlock): it sends the caller back to lock them first (BH001),
// having written nothing.
func TestLoneHoldWhoseBucketFilledMeanwhileLocksFirst(t *testing.T) {
	t.Parallel()
	pool, _, id := newTwoBucketFlight(t)
	ctx := context.Background()
	err := whileBucketFills(t, pool, id, func() error {
		calls := []*call{{Ctx: ctx, Req: HoldRequest{CustomerID: 1, FlightID: id, FareClass: "ECONOMY", Quantity: 1}}}
		_, err := holdBatch(ctx, pool, id, calls, epoch, 10*time.Minute, booking.HoldLimit{}, false)
		return err
	})
	if pg.State(err) != bucketsMoved {
		t.Fatalf("the hold whose bucket filled meanwhile: %v, want SQLSTATE %s (lock the buckets first)", err, bucketsMoved)
	}
	var bookings, events int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM booking), (SELECT count(*) FROM outbox WHERE type = 'booking.held')`).
		Scan(&bookings, &events); err != nil {
		t.Fatal(err)
	}
	if bookings != 0 || events != 0 {
		t.Errorf("sent back, the hold left %d bookings and %d events, want none", bookings, events)
	}
}

// newTwoBucketFlight is a flight whose ECONOMY class of 4 is split over two
// buckets of 2, on a database of its own.
func newTwoBucketFlight(t *testing.T) (*pgxpool.Pool, *Service, int64) {
	pool := pgtest.NewPool(t)
	svc := NewService(pool, clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute})
	return pool, svc, newTestFlight(t, svc, NewFare{Class: "ECONOMY", Price: 100, Capacity: 4, Buckets: 2})
}

// whileBucketFills runs hold while another transaction fills bucket 0 of
// flight id (the first of two equally roomy ones, where a lone hold
// decides to go): the hold decides on the bucket as committed, waits for
// the other's lock, and goes on once the bucket is full. It returns hold's
// error.
func whileBucketFills(t *testing.T, pool *pgxpool.Pool, id int64, hold func() error) error {
	t.Helper()
	ctx := context.Background()
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	if _, err := other.Exec(ctx, `UPDATE fare_bucket SET held = quota WHERE flight_id = $1 AND bucket = 0`, id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- hold() }()
	awaitLockWait(t, pool, done)
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return <-done
}

// awaitLockWait waits until a session of the test's database waits for a
// lock (the hold sent, whose result done carries, waiting for the fare
// bucket), and reports whether that session had written to the outbox by
// then. It fails the test if the hold finishes first or never waits.
func awaitLockWait(t *testing.T, pool *pgxpool.Pool, done <-chan error) (wroteEvent bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := pool.QueryRow(context.Background(), `SELECT count(*) > 0, coalesce(bool_or(EXISTS (SELECT 1 FROM pg_locks l
				WHERE l.pid = a.pid AND l.granted AND l.relation = 'outbox'::regclass AND l.mode = 'RowExclusiveLock')), false)
			FROM pg_stat_activity a WHERE a.datname = current_database() AND a.wait_event_type = 'Lock'`).Scan(&waiting, &wroteEvent); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return wroteEvent
		}
		select {
		case err := <-done:
			t.Fatalf("the hold finished without waiting for the fare bucket: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the hold never waited for the fare bucket")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
