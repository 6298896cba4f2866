package flight

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
	"berth.dev/berth/internal/policy"
)

var (
	epoch    = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	flightNo atomic.Int64
)

func newTestFlight(t *testing.T, svc *Service, fares ...NewFare) int64 {
	t.Helper()
	for i := range fares {
		if fares[i].Currency == "" {
			fares[i].Currency = "VND"
		}
		if fares[i].RefundRule == nil {
			fares[i].RefundRule = policy.FlightDefault
		}
	}
	f, err := svc.Create(context.Background(), NewFlight{Code: fmt.Sprintf("VN%d", flightNo.Add(1)), From: "SGN", To: "DAD",
		DepartureAt: epoch.Add(72 * time.Hour), ArrivalAt: epoch.Add(73 * time.Hour), Fares: fares})
	if err != nil {
		t.Fatal(err)
	}
	return f.ID
}

// One batch decides each request against the locked state and the
// requests before it: overlaps, unknown seats, wrong classes and quota are
// each refused alone, the rest are held.
func TestHoldBatchDecidesEachRequestAlone(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	svc := NewService(pool, clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute})
	id := newTestFlight(t, svc,
		NewFare{Class: "ECONOMY", Price: 100, Capacity: 6, Seats: []string{"1A", "1B", "1C", "2A"}},
		NewFare{Class: "BUSINESS", Price: 900, Capacity: 1, Seats: []string{"9A"}})
	reqs := []HoldRequest{
		{CustomerID: 1, FlightID: id, FareClass: "ECONOMY", Seats: []string{"1A", "1B"}},
		{CustomerID: 2, FlightID: id, FareClass: "ECONOMY", Seats: []string{"1B"}},       // taken by 1 in this batch
		{CustomerID: 3, FlightID: id, FareClass: "ECONOMY", Quantity: 2},                 // fits: 4 of 6
		{CustomerID: 4, FlightID: id, FareClass: "ECONOMY", Seats: []string{"99Z"}},      // no such seat
		{CustomerID: 5, FlightID: id, FareClass: "BUSINESS", Seats: []string{"2A"}},      // seat of another class
		{CustomerID: 6, FlightID: id, FareClass: "ECONOMY", Seats: []string{"1C", "2A"}}, // fits: 6 of 6
		{CustomerID: 7, FlightID: id, FareClass: "ECONOMY", Quantity: 1},                 // sold out
		{CustomerID: 8, FlightID: id, FareClass: "FIRST", Quantity: 1},                   // no such class
		{CustomerID: 9, FlightID: id, FareClass: "BUSINESS", Quantity: 1},                // fits
	}
	want := []fault.Code{"", fault.SeatUnavailable, "", fault.ValidationFailed, fault.ValidationFailed, "",
		fault.SoldOut, fault.ValidationFailed, ""}
	var results []result
	err := pg.InTx(context.Background(), pool, func(tx pgx.Tx) error {
		for i := range reqs {
			if err := reqs[i].Validate(); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		results, err = holdBatch(context.Background(), tx, id, reqs, epoch, 10*time.Minute, false)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if got := fault.CodeOf(r.err); got != want[i] || (r.err == nil) != (r.b != nil) {
			t.Errorf("request %d: booking %v err %v, want code %q", i, r.b != nil, r.err, want[i])
		}
		if r.err != nil && fault.CodeOf(r.err) == "" {
			t.Errorf("request %d: internal error %v", i, r.err)
		}
	}
	if results[0].b != nil && results[0].b.Amount != 200 {
		t.Errorf("amount = %d, want 2 × 100", results[0].b.Amount)
	}
	var held, seats int
	if err := pool.QueryRow(context.Background(), `SELECT
			(SELECT sum(held) FROM fare_bucket WHERE flight_id = $1 AND fare_class = 'ECONOMY'),
			(SELECT count(*) FROM seat WHERE flight_id = $1 AND status = 'HELD')`, id).Scan(&held, &seats); err != nil {
		t.Fatal(err)
	}
	if held != 6 || seats != 4 {
		t.Errorf("ECONOMY held %d, seats held %d; want 6 and 4 (1A 1B 1C 2A; BUSINESS went by quantity)", held, seats)
	}
}

// A hold that fits the class but no single bucket moves quota share into
// its bucket, in a batch and alone; the shares still add up exactly.
func TestBucketsNeverRefuseWhatTheClassCanTake(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	svc := NewService(pool, clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute})
	id := newTestFlight(t, svc, NewFare{Class: "ECONOMY", Price: 100, Capacity: 9, Buckets: 3})
	ctx := context.Background()
	// Two units in each bucket: 3 of 9 left, one per bucket.
	for b := int16(0); b < 3; b++ {
		err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
			return takeQuota(ctx, tx, id, "ECONOMY", b, 2)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Alone: three units into bucket 1, which has room for one.
	err := pg.InTx(ctx, pool, func(tx pgx.Tx) error { return takeQuota(ctx, tx, id, "ECONOMY", 1, 3) })
	if err != nil {
		t.Fatalf("a hold the class can take was refused: %v", err)
	}
	err = pg.InTx(ctx, pool, func(tx pgx.Tx) error { return takeQuota(ctx, tx, id, "ECONOMY", 2, 1) })
	if !fault.Is(err, fault.SoldOut) {
		t.Fatalf("a hold past the class quota: err %v, want sold_out", err)
	}
	var quota, used int
	if err := pool.QueryRow(ctx, `SELECT sum(quota), sum(held) FROM fare_bucket WHERE flight_id = $1`, id).Scan(&quota, &used); err != nil {
		t.Fatal(err)
	}
	if quota != 9 || used != 9 {
		t.Errorf("shares %d, held %d; want 9 and 9", quota, used)
	}

	// In a batch: a fresh class, 3 buckets of 2, one unit left in each.
	id2 := newTestFlight(t, svc, NewFare{Class: "PREMIUM", Price: 100, Capacity: 6, Buckets: 3})
	err = pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		for b := int16(0); b < 3; b++ {
			if err := takeQuota(ctx, tx, id2, "PREMIUM", b, 1); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []HoldRequest{{CustomerID: 1, FlightID: id2, FareClass: "PREMIUM", Quantity: 3}}
	var results []result
	err = pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		results, err = holdBatch(ctx, tx, id2, reqs, epoch, time.Minute, false)
		return err
	})
	if err != nil || results[0].err != nil {
		t.Fatalf("batch hold of what the class can take: %v / %v", err, results[0].err)
	}
}

// The database itself refuses bucket shares that do not add up to the
// class quota, whatever the Go code does.
func TestBucketSharesAreCheckedByTheDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	svc := NewService(pool, clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute})
	id := newTestFlight(t, svc, NewFare{Class: "ECONOMY", Price: 100, Capacity: 10, OverbookLimit: 2, Buckets: 4})
	ctx := context.Background()
	_, err := pool.Exec(ctx, `UPDATE fare_bucket SET quota = quota + 1 WHERE flight_id = $1 AND bucket = 0`, id)
	if !pg.Violates(err, "fare_quota_exact") {
		t.Errorf("raising one share: err %v, want a fare_quota_exact violation", err)
	}
	_, err = pool.Exec(ctx, `UPDATE fare_bucket SET held = quota + 1 WHERE flight_id = $1 AND bucket = 1`, id)
	if !pg.Violates(err, "fare_bucket_quota_check") {
		t.Errorf("over-holding a bucket: err %v, want a fare_bucket_quota_check violation", err)
	}
	// Moving share between buckets keeps the sum and is allowed.
	if _, err := pool.Exec(ctx, `UPDATE fare_bucket SET quota = quota + CASE bucket WHEN 0 THEN 1 WHEN 1 THEN -1 ELSE 0 END
		WHERE flight_id = $1`, id); err != nil {
		t.Errorf("moving share: %v", err)
	}
}

// Changing the overbooking limit or the number of buckets spreads the free
// room again and keeps the shares exact.
func TestChangeFareRespreadsRoom(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	svc := NewService(pool, clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute})
	id := newTestFlight(t, svc, NewFare{Class: "ECONOMY", Price: 100, Capacity: 10})
	ctx := context.Background()
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error { return takeQuota(ctx, tx, id, "ECONOMY", 0, 4) }); err != nil {
		t.Fatal(err)
	}
	four, two := 4, 2
	f, err := svc.ChangeFare(ctx, id, "ECONOMY", FareChange{OverbookLimit: &two, Buckets: &four})
	if err != nil {
		t.Fatal(err)
	}
	if f.Buckets != 4 || f.OverbookLimit != 2 || f.Held != 4 || f.Available() != 8 {
		t.Errorf("fare = %+v, want 4 buckets, limit 2, held 4, 8 available", f)
	}
	one := 1
	if _, err := svc.ChangeFare(ctx, id, "ECONOMY", FareChange{Buckets: &one}); !fault.Is(err, fault.ValidationFailed) {
		t.Errorf("shrinking buckets: err %v, want validation_failed", err)
	}
	// Lowering the limit below what is used is refused.
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error { return takeQuota(ctx, tx, id, "ECONOMY", 3, 7) }); err != nil {
		t.Fatal(err)
	}
	zero := 0
	if _, err := svc.ChangeFare(ctx, id, "ECONOMY", FareChange{OverbookLimit: &zero}); !fault.Is(err, fault.InvalidState) {
		t.Errorf("limit below held: err %v, want invalid_state", err)
	}
}

// A batch decides on counters it read without a lock; when another
// transaction takes that room before the batch's counter update, the
// batch fails as a whole (nothing of it stays) and the coalescer decides
// again with the counters locked: the holds are then refused, not sold.
func TestBatchThatLostItsRoomIsDecidedAgain(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	svc := NewService(pool, clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute})
	ctx := context.Background()
	reqs := func(id int64) []HoldRequest {
		return []HoldRequest{
			{CustomerID: 1, FlightID: id, FareClass: "ECONOMY", Quantity: 1},
			{CustomerID: 2, FlightID: id, FareClass: "ECONOMY", Quantity: 1},
		}
	}
	// takeRoomDuring takes the class's last two units in a transaction
	// that commits only once batch is waiting for the counter row.
	takeRoomDuring := func(t *testing.T, id int64, batch func() error) error {
		t.Helper()
		other, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = other.Rollback(ctx) }()
		if _, err := other.Exec(ctx, `UPDATE fare_bucket SET held = held + 2 WHERE flight_id = $1`, id); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- batch() }()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var waiting int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting > 0 {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("the batch finished without waiting for the counter row: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("the batch never waited for the counter row")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := other.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return <-done
	}
	counts := func(t *testing.T, id int64) (held, bookings int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT (SELECT sum(held) FROM fare_bucket WHERE flight_id = $1),
			(SELECT count(*) FROM booking WHERE flight_id = $1)`, id).Scan(&held, &bookings); err != nil {
			t.Fatal(err)
		}
		return held, bookings
	}

	id := newTestFlight(t, svc, NewFare{Class: "ECONOMY", Price: 100, Capacity: 2})
	err := takeRoomDuring(t, id, func() error {
		return pg.InTx(ctx, pool, func(tx pgx.Tx) error {
			_, err := holdBatch(ctx, tx, id, reqs(id), epoch, time.Minute, false)
			return err
		})
	})
	if !errors.Is(err, errQuotaRace) {
		t.Fatalf("batch err = %v, want errQuotaRace", err)
	}
	if held, bookings := counts(t, id); held != 2 || bookings != 0 {
		t.Errorf("held %d, bookings %d; want 2 (the other transaction's) and none", held, bookings)
	}

	// Through the coalescer: the same race ends in two sold_out answers.
	id = newTestFlight(t, svc, NewFare{Class: "ECONOMY", Price: 100, Capacity: 2})
	c := newCoalescer(svc, 64, 2, 0, 0, nil)
	var batch []*call
	for _, r := range reqs(id) {
		batch = append(batch, &call{ctx: ctx, req: r, done: make(chan struct{})})
	}
	if err := takeRoomDuring(t, id, func() error { c.flush(id, batch); return nil }); err != nil {
		t.Fatal(err)
	}
	for i, cl := range batch {
		if !fault.Is(cl.err, fault.SoldOut) || cl.b != nil {
			t.Errorf("hold %d: booking %v err %v, want sold_out", i, cl.b, cl.err)
		}
	}
	if held, bookings := counts(t, id); held != 2 || bookings != 0 {
		t.Errorf("held %d, bookings %d; want 2 and none", held, bookings)
	}
}
