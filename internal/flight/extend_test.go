package flight_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg/pgtest"
	"berth.dev/berth/internal/rental"
)

// One extension per hold, by BERTH_HOLD_EXTENSION, never past departure;
// its seats follow the new deadline, so nobody takes them at the old one.
func TestExtendHold(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 12, "ABC")})
	ctx := context.Background()
	one := s.Customer(1)
	bid := one.HoldSeats(t, flightID, "ECONOMY", "12A", "12B").BookingID
	refused := func(what string, p *apptest.Problem, status int, code string) {
		t.Helper()
		if !p.Is(status, code) {
			t.Fatalf("%s: %v, want %d %s", what, p, status, code)
		}
	}
	_, p := s.Customer(2).TryExtend(t, bid)
	refused("another's booking", p, http.StatusNotFound, "not_found")
	_, p = s.Admin().TryExtend(t, bid)
	refused("an admin", p, http.StatusForbidden, "forbidden")
	s.Clock.Advance(9 * time.Minute)
	want := apptest.Epoch.Add(15 * time.Minute)
	if got := one.Extend(t, bid).HoldExpiresAt; got == nil || !got.Equal(want) {
		t.Errorf("holdExpiresAt = %v, want %s (10m hold + 5m extension)", got, want.Format(time.RFC3339))
	}
	_, p = one.TryExtend(t, bid)
	refused("extend twice", p, http.StatusConflict, "invalid_state")
	var events int
	if err := s.App.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE booking_id = $1 AND type = 'booking.extended'`, bid).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 1 {
		t.Errorf("%d booking.extended events, want 1", events)
	}
	// Past the old deadline the seats are still the extended hold's.
	s.Clock.Set(apptest.Epoch.Add(12 * time.Minute))
	_, p = s.Customer(2).TryHoldSeats(t, flightID, "ECONOMY", "12A")
	refused("take a seat of the extended hold", p, http.StatusConflict, "seat_unavailable")
	if n, err := s.App.Sweeper.Pass(ctx); err != nil || n != 0 {
		t.Errorf("sweep before the new deadline expired %d (err %v), want 0", n, err)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
	s.Clock.Set(want)
	_, p = one.TryExtend(t, bid)
	refused("extend an expired hold", p, http.StatusConflict, "invalid_state")

	// Never past departure (48h after the epoch).
	s.Clock.Set(apptest.Epoch.Add(48*time.Hour - 12*time.Minute))
	three := s.Customer(3)
	near := three.HoldQuantity(t, flightID, "ECONOMY", 1).BookingID
	if got := three.Extend(t, near).HoldExpiresAt; got == nil || !got.Equal(apptest.Epoch.Add(48*time.Hour)) {
		t.Errorf("holdExpiresAt near departure = %v, want the departure", got)
	}
	// A hold that already lasts until departure cannot be extended.
	s.Clock.Advance(3 * time.Minute)
	if _, err := s.App.Sweeper.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	five := s.Customer(5)
	_, p = five.TryExtend(t, five.HoldQuantity(t, flightID, "ECONOMY", 1).BookingID)
	refused("extend a hold that ends at departure", p, http.StatusConflict, "invalid_state")
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}

// An extension racing the sweeper at the deadline, as two processes whose
// clocks disagree by a millisecond would: the sweeper's clock says the hold
// is due, the extension's that it still runs. For every hold exactly one
// of them wins; an extended hold is never expired, an expired one never
// extended.
func TestExtendRacesSweeperAtDeadline(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	const holds = 40
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 29, "AB")})
	ctx := context.Background()
	ids := make([]int64, holds)
	for i := range ids {
		seat := apptest.Seats(10, 29, "AB")[i]
		ids[i] = s.Customer(int64(100+i)).HoldSeats(t, flightID, "ECONOMY", seat).BookingID
	}
	deadline := apptest.Epoch.Add(10 * time.Minute)
	s.Clock.Set(deadline)
	early := clock.NewFake(deadline.Add(-time.Millisecond))
	life := booking.NewLifecycle(early, map[booking.Kind]booking.Inventory{
		booking.KindFlight: s.App.Flights.Inventory(), booking.KindCar: rental.Inventory{}})

	type result struct {
		extended bool
		expired  int
		err      error
	}
	rs := apptest.Race(2*holds, func(i int) result {
		if i%2 == 0 {
			_, err := life.Extend(ctx, s.App.Pool, auth.Caller{ID: int64(100 + i/2), Role: "customer"}, ids[i/2], 5*time.Minute)
			return result{extended: err == nil, err: err}
		}
		found, err := s.App.Life.ExpireOne(ctx, s.App.Pool)
		n := 0
		if found {
			n = 1
		}
		return result{expired: n, err: err}
	})
	extended, expired := 0, 0
	for _, r := range rs {
		if r.extended {
			extended++
		}
		expired += r.expired
	}
	// Whatever the race left due, the sweeper takes now.
	n, err := s.App.Sweeper.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expired += n
	var dbExtended, dbExpired int
	if err := s.App.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'HELD' AND extended_at IS NOT NULL
			AND hold_expires_at = $2), count(*) FILTER (WHERE status = 'EXPIRED' AND extended_at IS NULL)
		FROM booking WHERE flight_id = $1`, flightID, deadline.Add(5*time.Minute)).Scan(&dbExtended, &dbExpired); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d holds at the deadline: %d extended, %d expired", holds, extended, expired)
	if extended+expired != holds || dbExtended != extended || dbExpired != expired {
		t.Errorf("extended %d + expired %d, want %d in all; stored: %d extended, %d expired",
			extended, expired, holds, dbExtended, dbExpired)
	}
	for _, r := range rs {
		if r.err != nil && !isInvalidState(r.err) {
			t.Errorf("unexpected error: %v", r.err)
		}
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}

func isInvalidState(err error) bool {
	var f *fault.Error
	return errors.As(err, &f) && f.Code == fault.InvalidState
}

// The same race on real clocks across two berth processes, each running
// its sweeper every second: 30 holds of 3 s are each extended within
// ±20 ms of their deadline through one process while both sweep. Whatever
// the timing, every extension answered 200 left a HELD hold 5 minutes
// later, every one answered 409 invalid_state was refused because the
// hold was over, which the sweepers then expired; never both.
func TestExtendRacesSweepersTwoProcesses(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	env := []string{"BERTH_FLIGHT_HOLD_TTL=3s", "BERTH_SWEEP_INTERVAL=1s", "BERTH_DB_MAX_CONNS=10"}
	procs := []*apptest.Process{apptest.StartProcess(t, dbURL, env...), apptest.StartProcess(t, dbURL, env...)}
	now := time.Now()
	admin := apptest.Token(t, "admin", 1, now)
	seats := apptest.Seats(10, 24, "AB")
	flightID := apptest.CreateFlight(t, procs[0].URL, admin, now.Add(72*time.Hour),
		apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: seats})
	type heldSeat struct {
		id       int64
		client   apptest.Client
		deadline time.Time
	}
	holds := make([]heldSeat, len(seats))
	for i, seat := range seats {
		c := apptest.Client{Base: procs[i%2].URL, Token: apptest.Token(t, "customer", int64(100+i), now)}
		v := c.HoldSeats(t, flightID, "ECONOMY", seat)
		holds[i] = heldSeat{id: v.BookingID, client: c, deadline: *v.HoldExpiresAt}
	}
	rs := apptest.Race(len(holds), func(i int) apptest.Attempt {
		h := holds[i]
		time.Sleep(time.Until(h.deadline.Add(time.Duration(i%5-2) * 10 * time.Millisecond)))
		return apptest.Try(h.client.TryExtend(t, h.id))
	})
	time.Sleep(2500 * time.Millisecond) // two sweeps of each process
	pool := pgtest.Open(t, dbURL)
	got := apptest.Tally(rs)
	for i, r := range rs {
		var status string
		var extended bool
		var expires time.Time
		if err := pool.QueryRow(context.Background(), `SELECT status, extended_at IS NOT NULL, hold_expires_at FROM booking WHERE id = $1`,
			holds[i].id).Scan(&status, &extended, &expires); err != nil {
			t.Fatal(err)
		}
		switch {
		case r.Problem == nil:
			if status != "HELD" || !extended || !expires.Equal(holds[i].deadline.Add(5*time.Minute)) {
				t.Errorf("booking %d: extension answered 200 but it is %s, extended %v, until %s", holds[i].id, status, extended, expires)
			}
		case r.Problem.Is(http.StatusConflict, "invalid_state"):
			if status != "EXPIRED" || extended {
				t.Errorf("booking %d: extension refused but it is %s, extended %v", holds[i].id, status, extended)
			}
		default:
			t.Errorf("booking %d: extension answered %s", holds[i].id, r.Problem)
		}
	}
	t.Logf("%d holds extended at their deadline ±20 ms through two processes: %v", len(holds), got)
	apptest.MustAudit(t, pool, time.Now())
}

// A join under way when an extension runs: the extension waits for it and
// is refused once the entry is committed, instead of extending past a line
// that it could not see yet.
func TestExtendWaitsForAJoinUnderWay(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 12, "A")})
	ctx := context.Background()
	one := s.Customer(1)
	bid := one.HoldQuantity(t, flightID, "ECONOMY", 1).BookingID

	// What a join does, held open: the class's buckets locked, the entry
	// written, not yet committed.
	tx, err := s.App.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM fare_bucket WHERE flight_id = $1 FOR UPDATE`, flightID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO waitlist (flight_id, fare_class, customer_id, quantity, created_at, updated_at)
		VALUES ($1, 'ECONOMY', 2, 1, $2, $2)`, flightID, s.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	answer := make(chan apptest.Attempt, 1)
	go func() { answer <- apptest.Try(one.TryExtend(t, bid)) }()
	select {
	case r := <-answer:
		t.Fatalf("the extension answered %+v while a join was under way; want it to wait", r)
	case <-time.After(500 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-answer; !r.Problem.Is(http.StatusConflict, "invalid_state") {
		t.Fatalf("extension after the join: %+v, want 409 invalid_state", r)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}
