package flight

import (
	"context"
	"encoding/json"
	"errors"

	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/booking"
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
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			t.Fatal(err)
		}
	}
	results, err := holdBatch(context.Background(), pool, id, calls(reqs), epoch, 10*time.Minute, booking.HoldLimit{}, false)
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

// calls wraps requests for holdBatch, without Idempotency-Keys.
func calls(reqs []HoldRequest) []*call {
	out := make([]*call, len(reqs))
	for i, r := range reqs {
		out[i] = &call{Ctx: context.Background(), Req: r}
	}
	return out
}

// useQuota adds n held units to each bucket of class on flight id, as
// earlier holds would have.
func useQuota(t *testing.T, pool *pgxpool.Pool, id int64, class string, n int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE fare_bucket SET held = held + $3 WHERE flight_id = $1 AND fare_class = $2`,
		id, class, n); err != nil {
		t.Fatal(err)
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
	useQuota(t, pool, id, "ECONOMY", 2)
	// Alone: three units, which no bucket has room for.
	if _, err := svc.Hold(ctx, HoldRequest{CustomerID: 1, FlightID: id, FareClass: "ECONOMY", Quantity: 3}); err != nil {
		t.Fatalf("a hold the class can take was refused: %v", err)
	}
	_, err := svc.Hold(ctx, HoldRequest{CustomerID: 2, FlightID: id, FareClass: "ECONOMY", Quantity: 1})
	if !fault.Is(err, fault.SoldOut) {
		t.Fatalf("a hold past the class quota: err %v, want sold_out", err)
	}
	var quota, used, moved int
	if err := pool.QueryRow(ctx, `SELECT sum(quota), sum(held), count(*) FILTER (WHERE quota <> 3) FROM fare_bucket WHERE flight_id = $1`,
		id).Scan(&quota, &used, &moved); err != nil {
		t.Fatal(err)
	}
	if quota != 9 || used != 9 || moved == 0 {
		t.Errorf("shares %d, held %d, %d shares moved; want 9, 9 and some", quota, used, moved)
	}

	// In a batch: a fresh class, 3 buckets of 2, one unit left in each;
	// the first request moves share, the second finds the class full.
	id2 := newTestFlight(t, svc, NewFare{Class: "PREMIUM", Price: 100, Capacity: 6, Buckets: 3})
	useQuota(t, pool, id2, "PREMIUM", 1)
	results, err := holdBatch(ctx, pool, id2, calls([]HoldRequest{
		{CustomerID: 1, FlightID: id2, FareClass: "PREMIUM", Quantity: 3},
		{CustomerID: 2, FlightID: id2, FareClass: "PREMIUM", Quantity: 1},
	}), epoch, time.Minute, booking.HoldLimit{}, false)
	if err != nil || results[0].err != nil {
		t.Fatalf("batch hold of what the class can take: %v / %v", err, results)
	}
	if !fault.Is(results[1].err, fault.SoldOut) {
		t.Errorf("second hold of the batch: %v, want sold_out", results[1].err)
	}
	if b := results[0].b; b.Quantity != 3 || b.Amount != 300 {
		t.Errorf("booking = %+v, want 3 units for 300", b)
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
	if _, err := svc.Hold(ctx, HoldRequest{CustomerID: 1, FlightID: id, FareClass: "ECONOMY", Quantity: 4}); err != nil {
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
	// Lowering the limit below what is used is refused (7 units: more
	// than any bucket's 2, so share moves).
	if _, err := svc.Hold(ctx, HoldRequest{CustomerID: 2, FlightID: id, FareClass: "ECONOMY", Quantity: 7}); err != nil {
		t.Fatal(err)
	}
	zero := 0
	if _, err := svc.ChangeFare(ctx, id, "ECONOMY", FareChange{OverbookLimit: &zero}); !fault.Is(err, fault.InvalidState) {
		t.Errorf("limit below held: err %v, want invalid_state", err)
	}
}

// A batch waits for the counter rows another transaction holds, and
// decides on what that transaction committed: here the class's last two
// units are gone, and both holds of the batch are refused, not sold.
func TestBatchWaitsForTheCounterRow(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	svc := NewService(pool, clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute})
	ctx := context.Background()
	id := newTestFlight(t, svc, NewFare{Class: "ECONOMY", Price: 100, Capacity: 2})
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	if _, err := other.Exec(ctx, `UPDATE fare_bucket SET held = held + 2 WHERE flight_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	batch := calls([]HoldRequest{
		{CustomerID: 1, FlightID: id, FareClass: "ECONOMY", Quantity: 1},
		{CustomerID: 2, FlightID: id, FareClass: "ECONOMY", Quantity: 1},
	})
	done := make(chan error, 1)
	go func() { done <- svc.holdMany(ctx, id, batch) }()
	deadline := time.Now().Add(10 * time.Second)
	for pgtest.LockWaiters(t, pool) == 0 {
		select {
		case err := <-done:
			t.Fatalf("the batch finished without waiting for the counter row (%v)", err)
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
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, cl := range batch {
		if !fault.Is(cl.Err, fault.SoldOut) || cl.Out != nil {
			t.Errorf("hold %d: booking %v err %v, want sold_out", i, cl.Out, cl.Err)
		}
	}
	var held, bookings int
	if err := pool.QueryRow(ctx, `SELECT (SELECT sum(held) FROM fare_bucket WHERE flight_id = $1),
		(SELECT count(*) FROM booking WHERE flight_id = $1)`, id).Scan(&held, &bookings); err != nil {
		t.Fatal(err)
	}
	if held != 2 || bookings != 0 {
		t.Errorf("held %d, bookings %d; want 2 (the other transaction's) and none", held, bookings)
	}
}

// The booking.held event the database writes carries exactly the JSON Go
// renders for the same booking (booking.View), which the consumers read:
// seat and quantity holds, times with and without a fraction of a second.
func TestHeldEventIsTheBookingsView(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	clk := clock.NewFake(epoch)
	svc := NewService(pool, clk, Config{HoldTTL: 10 * time.Minute})
	id := newTestFlight(t, svc, NewFare{Class: "ECONOMY", Price: 1_500_000, Capacity: 9, Seats: []string{"1A", "1B", "10C"}})
	ctx := context.Background()
	var made []*booking.Booking
	for i, step := range []struct {
		at  time.Duration
		req HoldRequest
	}{
		{123456 * time.Microsecond, HoldRequest{CustomerID: 1, FlightID: id, FareClass: "ECONOMY", Seats: []string{"10C", "1A"}}},
		{120 * time.Millisecond, HoldRequest{CustomerID: 2, FlightID: id, FareClass: "ECONOMY", Quantity: 3}},
		{time.Second, HoldRequest{CustomerID: 3, FlightID: id, FareClass: "ECONOMY", Seats: []string{"1B"}}},
	} {
		clk.Set(epoch.Add(step.at))
		b, err := svc.Hold(ctx, step.req)
		if err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
		made = append(made, b)
	}
	for _, b := range made {
		stored, err := booking.Scan(pool.QueryRow(ctx, `SELECT `+booking.Columns+` FROM booking WHERE id = $1`, b.ID))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []booking.View{b.View(), stored.View()} {
			want, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var same bool
			var got string
			if err := pool.QueryRow(ctx, `SELECT payload = $2::jsonb, payload::text FROM outbox WHERE booking_id = $1 AND type = 'booking.held'`,
				b.ID, string(want)).Scan(&same, &got); err != nil {
				t.Fatal(err)
			}
			if !same {
				t.Errorf("booking %d: event payload\n%s\nwant (booking.View)\n%s", b.ID, got, want)
			}
		}
	}
}

// The hold limit counts the customer's holds of the window, those made
// earlier in the same batch included; a request over it is refused alone
// (the others of the batch are held), with the time until the oldest hold
// of the window leaves it, and the window moving on lets the customer hold
// again.
func TestHoldLimitCountsTheBatch(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	svc := NewService(pool, clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute})
	id := newTestFlight(t, svc, NewFare{Class: "ECONOMY", Price: 100, Capacity: 20})
	limit := booking.HoldLimit{N: 2, Window: 15 * time.Minute}
	ctx := context.Background()
	hold := func(now time.Time, customers ...int64) []result {
		t.Helper()
		reqs := make([]HoldRequest, len(customers))
		for i, c := range customers {
			reqs[i] = HoldRequest{CustomerID: c, FlightID: id, FareClass: "ECONOMY", Quantity: 1}
		}
		results, err := holdBatch(ctx, pool, id, calls(reqs), now, 10*time.Minute, limit, false)
		if err != nil {
			t.Fatal(err)
		}
		return results
	}
	if r := hold(epoch, 1); r[0].err != nil {
		t.Fatalf("first hold: %v", r[0].err)
	}
	got := hold(epoch.Add(5*time.Minute), 1, 2, 1, 1, 2)
	want := []fault.Code{"", "", fault.RateLimited, fault.RateLimited, ""}
	for i, r := range got {
		if fault.CodeOf(r.err) != want[i] || (r.err == nil) != (r.b != nil) {
			t.Errorf("request %d: booking %v err %v, want code %q", i, r.b != nil, r.err, want[i])
		}
	}
	var e *fault.Error
	if !errors.As(got[2].err, &e) || e.RetryAfter != 10*time.Minute {
		t.Errorf("refusal %v, want Retry-After 10m: the first hold leaves the window 15m after it was made", got[2].err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM booking WHERE customer_id = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("customer 1 has %d bookings, want the limit's 2", n)
	}
	// 15 minutes after the first hold it has left the window: one more fits.
	if r := hold(epoch.Add(15*time.Minute+time.Second), 1, 1); r[0].err != nil || !fault.Is(r[1].err, fault.RateLimited) {
		t.Errorf("after the first hold left the window: %v / %v, want one held and one rate_limited", r[0].err, r[1].err)
	}
}
