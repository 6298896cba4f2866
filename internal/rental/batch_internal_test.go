package rental

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/idempotency"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
	"berth.dev/berth/internal/policy"
)

// batchCar lists a car with a 2-hour turnaround and returns its id.
func batchCar(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var id int64
	if err := pool.QueryRow(t.Context(), `INSERT INTO car (host_id, plate, model, city, daily_price, deposit, currency, turnaround, created_at)
		VALUES (9, '30A-111.11', 'Kia Morning', 'HN', 100, 100, 'VND', interval '2 hours', now()) RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// batchCalls wraps requests, each with ctx, for holdMany.
func batchCalls(ctx context.Context, reqs ...HoldRequest) []*call {
	calls := make([]*call, len(reqs))
	for i, r := range reqs {
		calls[i] = &call{Ctx: ctx, Req: r}
	}
	return calls
}

// A batch of holds of one car decides each request on its own, in order,
// as the constraint would one after the other: a live booking, an earlier
// request of the batch, and the turnaround after either block; a stale
// hold does not (it is expired); the hold limit counts the batch's own
// holds, and only those made. What is written is exactly the holds answered, each with its
// event.
func TestCarBatchDecidesEachRequestAlone(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC))
	svc := newCarService(pool, clk, Config{HoldTTL: 15 * time.Minute, HoldLimit: booking.HoldLimit{N: 3, Window: 24 * time.Hour}})
	car := batchCar(t, pool)
	day := func(d, hour int) time.Time { return time.Date(2026, 3, d, hour, 0, 0, 0, time.UTC) }
	// Customer 5's first two holds: one goes stale (days 20–21), the other
	// is live (days 10–11).
	if _, err := svc.Hold(ctx, HoldRequest{CustomerID: 5, CarID: car, From: day(20, 9), To: day(21, 9)}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(16 * time.Minute)
	if _, err := svc.Hold(ctx, HoldRequest{CustomerID: 5, CarID: car, From: day(10, 9), To: day(11, 9)}); err != nil {
		t.Fatal(err)
	}
	calls := batchCalls(context.Background(),
		HoldRequest{CustomerID: 1, CarID: car, From: day(11, 10), To: day(12, 9)}, // in the live hold's turnaround
		HoldRequest{CustomerID: 2, CarID: car, From: day(20, 9), To: day(21, 9)},  // over the stale hold
		HoldRequest{CustomerID: 3, CarID: car, From: day(25, 9), To: day(26, 9)},
		HoldRequest{CustomerID: 4, CarID: car, From: day(25, 12), To: day(25, 18)}, // inside customer 3's
		HoldRequest{CustomerID: 4, CarID: car, From: day(26, 10), To: day(27, 9)},  // in customer 3's turnaround
		HoldRequest{CustomerID: 6, CarID: car, From: day(26, 11), To: day(27, 9)},  // right after it
		HoldRequest{CustomerID: 5, CarID: car, From: day(10, 12), To: day(10, 18)}, // refused: does not count
		HoldRequest{CustomerID: 5, CarID: car, From: day(15, 9), To: day(16, 9)},   // customer 5's third
		HoldRequest{CustomerID: 5, CarID: car, From: day(17, 9), To: day(18, 9)},   // and fourth: over the limit
	)
	if err := svc.holdMany(ctx, car, calls); err != nil {
		t.Fatal(err)
	}
	want := []fault.Code{fault.CarUnavailable, "", "", fault.CarUnavailable, fault.CarUnavailable, "", fault.CarUnavailable, "", fault.RateLimited}
	held := map[int64]bool{}
	for i, cl := range calls {
		switch {
		case want[i] == "" && (cl.Err != nil || cl.Out == nil):
			t.Errorf("request %d: booking %v err %v, want a hold", i, cl.Out, cl.Err)
		case want[i] == "":
			if !cl.Out.From.Equal(cl.Req.From) || !cl.Out.To.Equal(cl.Req.To) || cl.Out.CustomerID != cl.Req.CustomerID {
				t.Errorf("request %d got booking %d of customer %d for %v–%v", i, cl.Out.ID, cl.Out.CustomerID, cl.Out.From, cl.Out.To)
			}
			held[cl.Out.ID] = true
		case !fault.Is(cl.Err, want[i]) || cl.Out != nil:
			t.Errorf("request %d: booking %v err %v, want %s", i, cl.Out, cl.Err, want[i])
		}
	}
	var live, expired, events int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'HELD'), count(*) FILTER (WHERE status = 'EXPIRED'),
		(SELECT count(*) FROM outbox o JOIN booking x ON x.id = o.booking_id WHERE x.car_id = $1 AND o.type = 'booking.held')
		FROM booking WHERE car_id = $1`, car).Scan(&live, &expired, &events); err != nil {
		t.Fatal(err)
	}
	// The batch's 4 holds and customer 5's live one; the stale one expired.
	if live != 5 || expired != 1 || events != 6 {
		t.Errorf("%d held, %d expired, %d held events; want 5, 1 and 6", live, expired, events)
	}
	if len(held) != 4 {
		t.Errorf("%d distinct bookings answered, want 4", len(held))
	}
}

// A batch for a car that does not exist refuses each request as invalid.
func TestCarBatchForNoCar(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	svc := newBatchService(pool)
	from := time.Now().Add(72 * time.Hour).Truncate(time.Hour)
	calls := batchCalls(context.Background(), HoldRequest{CustomerID: 1, CarID: 999, From: from, To: from.Add(time.Hour)},
		HoldRequest{CustomerID: 2, CarID: 999, From: from.Add(5 * time.Hour), To: from.Add(6 * time.Hour)})
	if err := svc.holdMany(t.Context(), 999, calls); err != nil {
		t.Fatal(err)
	}
	for i, cl := range calls {
		if !fault.Is(cl.Err, fault.ValidationFailed) {
			t.Errorf("request %d: %v, want validation_failed", i, cl.Err)
		}
	}
}

// batchFixture returns a test database's pool, a batch service on it and
// a car to hold.
func batchFixture(t *testing.T) (*pgxpool.Pool, *Service, int64) {
	t.Helper()
	pool := pgtest.NewPool(t)
	return pool, newBatchService(pool), batchCar(t, pool)
}

func newBatchService(pool *pgxpool.Pool) *Service {
	return newCarService(pool, clock.System{}, Config{HoldTTL: 15 * time.Minute})
}

// newCarService is a car service on pool with cfg and clk, whose lifecycle
// knows cars only.
func newCarService(pool *pgxpool.Pool, clk clock.Clock, cfg Config) *Service {
	life := booking.NewLifecycle(clk, map[booking.Kind]booking.Inventory{booking.KindCar: Inventory{}})
	return NewService(pool, clk, life, cfg)
}

// The calendar read only leaves out what the constraint would refuse; the
// constraint still decides. A booking another transaction inserts without
// the car's lock, unseen by the batch's read, makes the batch's insert
// fail: nothing of the batch is written and the error is returned (the
// coalescer then holds each request alone); a batch of one is answered
// car_unavailable.
func TestCarBatchRefusedByTheConstraintWritesNothing(t *testing.T) {
	t.Parallel()
	pool, svc, car := batchFixture(t)
	ctx := t.Context()
	rule, err := json.Marshal(policy.CarRental)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Now().Add(72 * time.Hour).Truncate(time.Hour)
	for _, calls := range [][]*call{
		batchCalls(context.Background(), HoldRequest{CustomerID: 1, CarID: car, From: from, To: from.Add(24 * time.Hour)},
			HoldRequest{CustomerID: 2, CarID: car, From: from.Add(30 * 24 * time.Hour), To: from.Add(31 * 24 * time.Hour)}),
		batchCalls(context.Background(), HoldRequest{CustomerID: 3, CarID: car, From: from.Add(10 * 24 * time.Hour), To: from.Add(11 * 24 * time.Hour)}),
	} {
		other, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Exec(ctx, `INSERT INTO booking (kind, status, customer_id, host_id, amount, currency,
				hold_expires_at, starts_at, refund_rule, car_id, period, rental_price, created_at, updated_at)
			VALUES ('car', 'HELD', 9, 9, 100, 'VND', now() + interval '15 minutes', $2, $4, $1,
				tstzrange($2, $3, '[)'), 100, now(), now())`, car, calls[0].Req.From, calls[0].Req.To, rule); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- svc.holdMany(ctx, car, calls) }()
		pgtest.AwaitLockWait(t, pool)
		if err := other.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		err = <-done
		if len(calls) > 1 && !pg.Violates(err, "booking_car_no_overlap") {
			t.Errorf("a batch of %d whose insert the constraint refused: %v, want the violation", len(calls), err)
		}
		if len(calls) == 1 && !fault.Is(err, fault.CarUnavailable) {
			t.Errorf("a hold whose insert the constraint refused: %v, want car_unavailable", err)
		}
		var mine int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM booking WHERE car_id = $1 AND customer_id <> 9`, car).Scan(&mine); err != nil {
			t.Fatal(err)
		}
		if mine != 0 {
			t.Fatalf("%d bookings written by a refused batch, want none", mine)
		}
	}
}

// The events hold_car writes (booking.held, and booking.expired for a
// stale hold it clears) carry exactly the JSON Go renders for the same
// booking (booking.View), which the consumers read: times in the offset
// the client wrote them with, east and west of UTC and in UTC, with and
// without a fraction of a second.
func TestCarEventsAreTheBookingsView(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2026, 3, 1, 8, 0, 0, 123456000, time.UTC))
	svc := newCarService(pool, clk, Config{HoldTTL: 15 * time.Minute})
	car := batchCar(t, pool)
	hanoi, west := time.FixedZone("", 7*3600), time.FixedZone("", -(3*3600+30*60))
	var ids []int64
	for _, r := range []HoldRequest{
		{CustomerID: 1, CarID: car, From: time.Date(2026, 3, 10, 9, 0, 0, 0, hanoi), To: time.Date(2026, 3, 11, 9, 30, 0, 500000000, hanoi)},
		{CustomerID: 2, CarID: car, From: time.Date(2026, 3, 20, 9, 0, 0, 0, west), To: time.Date(2026, 3, 21, 9, 0, 0, 0, west)},
		{CustomerID: 3, CarID: car, From: time.Date(2026, 3, 25, 9, 0, 0, 0, time.UTC), To: time.Date(2026, 3, 26, 9, 0, 0, 0, time.UTC)},
	} {
		b, err := svc.Hold(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, b.ID)
	}
	// Customer 1's hold goes stale; customer 4's hold of its period
	// expires it.
	clk.Advance(20*time.Minute + 654321*time.Microsecond)
	b, err := svc.Hold(ctx, HoldRequest{CustomerID: 4, CarID: car, From: time.Date(2026, 3, 10, 10, 0, 0, 0, hanoi), To: time.Date(2026, 3, 10, 20, 0, 0, 0, hanoi)})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, b.ID)
	var seen []string
	for _, id := range ids {
		stored, err := booking.Scan(pool.QueryRow(ctx, `SELECT `+booking.Columns+` FROM booking WHERE id = $1`, id))
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(stored.View())
		if err != nil {
			t.Fatal(err)
		}
		var same bool
		var got string
		if err := pool.QueryRow(ctx, `SELECT payload = $2::jsonb, payload::text FROM outbox WHERE booking_id = $1 ORDER BY id DESC LIMIT 1`,
			id, string(want)).Scan(&same, &got); err != nil {
			t.Fatal(err)
		}
		if !same {
			t.Errorf("booking %d (%s): event payload\n%s\nwant (booking.View)\n%s", id, stored.Status, got, want)
		}
		seen = append(seen, string(stored.Status))
	}
	if want := "[EXPIRED HELD HELD HELD]"; fmt.Sprint(seen) != want {
		t.Errorf("the bookings are %v, want %s", seen, want)
	}
}

// A request of a batch whose Idempotency-Key a retry took over is refused
// alone: its booking is not made, the batch's other requests are held, and
// the key is left to the retry.
func TestCarBatchRefusesOnlyTheRequestWhoseKeyWasTakenOver(t *testing.T) {
	t.Parallel()
	pool, svc, car := batchFixture(t)
	ctx := t.Context()
	now := time.Now()
	const (
		mine  = "00000000-0000-4000-8000-000000000001"
		retry = "00000000-0000-4000-8000-000000000002"
	)
	for k, lease := range []string{retry, mine} {
		if _, err := pool.Exec(ctx, `INSERT INTO idempotency_key (caller_id, idem_key, method, path, request_hash, lease, locked_until, created_at, expires_at)
			VALUES ($1, 'k', 'POST', '/bookings', '\x00', $2, $3, $4, $3)`, k+1, lease, now.Add(time.Minute), now); err != nil {
			t.Fatal(err)
		}
	}
	from := now.Add(72 * time.Hour).Truncate(time.Hour)
	calls := []*call{
		{Ctx: pg.WithKeyClaim(ctx, pg.KeyClaim{CallerID: 1, Key: "k", Lease: mine}), // taken over by the retry
			Req: HoldRequest{CustomerID: 1, CarID: car, From: from, To: from.Add(24 * time.Hour)}},
		{Ctx: pg.WithKeyClaim(ctx, pg.KeyClaim{CallerID: 2, Key: "k", Lease: mine}),
			Req: HoldRequest{CustomerID: 2, CarID: car, From: from.Add(96 * time.Hour), To: from.Add(120 * time.Hour)}},
	}
	if err := svc.holdMany(ctx, car, calls); err != nil {
		t.Fatal(err)
	}
	if !fault.Is(calls[0].Err, fault.IdempotencyKeyInUse) || calls[0].Out != nil {
		t.Errorf("the request whose key was taken over: %v, %v; want idempotency_key_in_use and no booking", calls[0].Out, calls[0].Err)
	}
	if calls[1].Err != nil || calls[1].Out == nil {
		t.Fatalf("the other request: %v, want a hold", calls[1].Err)
	}
	var taken, made string
	var bookings int
	if err := pool.QueryRow(ctx, `SELECT (SELECT coalesce(effect, '') FROM idempotency_key WHERE caller_id = 1),
		(SELECT coalesce(effect, '') FROM idempotency_key WHERE caller_id = 2),
		(SELECT count(*) FROM booking WHERE car_id = $1)`, car).Scan(&taken, &made, &bookings); err != nil {
		t.Fatal(err)
	}
	if taken != "" || made != booking.EffectOf(calls[1].Out.ID) || bookings != 1 {
		t.Errorf("effects %q and %q, %d bookings; want none, %q and 1", taken, made, bookings, booking.EffectOf(calls[1].Out.ID))
	}
}

// The pending keys of a batch are claimed with it, in its transaction. A
// request whose key is already there (another request's), or whose key an
// earlier request of the batch claimed, is refused alone with
// pg.ErrKeyClaimed, which sends it down the path of a claimed key, and
// makes nothing; the others are held under keys that record their
// bookings.
func TestCarBatchClaimsItsPendingKeys(t *testing.T) {
	t.Parallel()
	pool, svc, car := batchFixture(t)
	ctx := t.Context()
	now := time.Now()
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_key (caller_id, idem_key, method, path, request_hash, response_status, created_at, expires_at)
		VALUES (1, 'answered', 'POST', '/bookings', '\x00', 201, $1, $2)`, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	pending := func(caller int64, key string) context.Context {
		return pg.WithKeyClaim(ctx, idempotency.Pending(idempotency.NewRequest(caller, key, "POST", "/bookings", nil)))
	}
	from := now.Add(72 * time.Hour).Truncate(time.Hour)
	day := func(d int) (time.Time, time.Time) {
		start := from.Add(time.Duration(d) * 72 * time.Hour)
		return start, start.Add(24 * time.Hour)
	}
	calls := make([]*call, 4)
	for i, c := range []struct {
		ctx    context.Context
		caller int64
	}{{pending(1, "answered"), 1}, {pending(2, "twice"), 2}, {pending(2, "twice"), 2}, {pending(3, "new"), 3}} {
		f, to := day(i)
		calls[i] = &call{Ctx: c.ctx, Req: HoldRequest{CustomerID: c.caller, CarID: car, From: f, To: to}}
	}
	if err := svc.holdMany(ctx, car, calls); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true, false, true} {
		switch {
		case want && (calls[i].Err != nil || calls[i].Out == nil):
			t.Errorf("request %d: %v, want a hold", i, calls[i].Err)
		case !want && (!errors.Is(calls[i].Err, pg.ErrKeyClaimed) || calls[i].Out != nil):
			t.Errorf("request %d: %v, %v; want pg.ErrKeyClaimed and no booking", i, calls[i].Out, calls[i].Err)
		}
	}
	var bookings int
	var effects []string
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM booking WHERE car_id = $1),
		ARRAY(SELECT coalesce(effect, '') FROM idempotency_key ORDER BY caller_id)`, car).Scan(&bookings, &effects); err != nil {
		t.Fatal(err)
	}
	want := []string{"", booking.EffectOf(calls[1].Out.ID), booking.EffectOf(calls[3].Out.ID)}
	if bookings != 2 || fmt.Sprint(effects) != fmt.Sprint(want) {
		t.Errorf("%d bookings and the keys' effects %q; want 2 and %q", bookings, effects, want)
	}
}
