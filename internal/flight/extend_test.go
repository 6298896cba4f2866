package flight_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
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
	r := post(s, 1, "/bookings", hold(flightID, "ECONOMY", "12A", "12B"))
	mustStatus(t, "hold", r, http.StatusCreated, "")
	bid := id(t, r, "bookingId")
	extend := func(customer, booking int64) *apptest.Response {
		return post(s, customer, fmt.Sprintf("/bookings/%d/extend", booking), nil)
	}
	mustStatus(t, "another's booking", extend(2, bid), http.StatusNotFound, "not_found")
	mustStatus(t, "an admin", s.Do(apptest.Request{Method: http.MethodPost, Path: fmt.Sprintf("/bookings/%d/extend", bid),
		Token: s.Token("admin", 1)}), http.StatusForbidden, "forbidden")
	s.Clock.Advance(9 * time.Minute)
	r = extend(1, bid)
	mustStatus(t, "extend", r, http.StatusOK, "")
	want := apptest.Epoch.Add(15 * time.Minute)
	if got := r.Map(t)["holdExpiresAt"]; got != want.Format(time.RFC3339) {
		t.Errorf("holdExpiresAt = %v, want %s (10m hold + 5m extension)", got, want.Format(time.RFC3339))
	}
	mustStatus(t, "extend twice", extend(1, bid), http.StatusConflict, "invalid_state")
	var events int
	if err := s.App.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE booking_id = $1 AND type = 'booking.extended'`, bid).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 1 {
		t.Errorf("%d booking.extended events, want 1", events)
	}
	// Past the old deadline the seats are still the extended hold's.
	s.Clock.Set(apptest.Epoch.Add(12 * time.Minute))
	mustStatus(t, "take a seat of the extended hold", post(s, 2, "/bookings", hold(flightID, "ECONOMY", "12A")),
		http.StatusConflict, "seat_unavailable")
	if n, err := s.App.Sweeper.Pass(ctx); err != nil || n != 0 {
		t.Errorf("sweep before the new deadline expired %d (err %v), want 0", n, err)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
	s.Clock.Set(want)
	mustStatus(t, "extend an expired hold", extend(1, bid), http.StatusConflict, "invalid_state")

	// Never past departure (48h after the epoch).
	s.Clock.Set(apptest.Epoch.Add(48*time.Hour - 12*time.Minute))
	r = post(s, 3, "/bookings", holdQty(flightID, "ECONOMY", 1))
	mustStatus(t, "hold near departure", r, http.StatusCreated, "")
	r = extend(3, id(t, r, "bookingId"))
	mustStatus(t, "extend near departure", r, http.StatusOK, "")
	if got := r.Map(t)["holdExpiresAt"]; got != apptest.Epoch.Add(48*time.Hour).Format(time.RFC3339) {
		t.Errorf("holdExpiresAt near departure = %v, want the departure", got)
	}
	// A hold that already lasts until departure cannot be extended.
	s.Clock.Advance(3 * time.Minute)
	if _, err := s.App.Sweeper.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	r2 := post(s, 5, "/bookings", holdQty(flightID, "ECONOMY", 1))
	mustStatus(t, "hold at departure - 9m", r2, http.StatusCreated, "")
	mustStatus(t, "extend a hold that ends at departure", extend(5, id(t, r2, "bookingId")), http.StatusConflict, "invalid_state")
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
		r := post(s, int64(100+i), "/bookings", hold(flightID, "ECONOMY", seat))
		mustStatus(t, "hold", r, http.StatusCreated, "")
		ids[i] = id(t, r, "bookingId")
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
			_, err := life.Extend(ctx, s.App.Pool, booking.Caller{ID: int64(100 + i/2), Role: "customer"}, ids[i/2], 5*time.Minute)
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
		customer int64
		deadline time.Time
	}
	holds := make([]heldSeat, len(seats))
	for i, seat := range seats {
		customer := int64(100 + i)
		r := apptest.Do(t, procs[i%2].URL, apptest.Request{Method: http.MethodPost, Path: "/bookings",
			Token: apptest.Token(t, "customer", customer, now), Body: hold(flightID, "ECONOMY", seat)})
		mustStatus(t, "hold", r, http.StatusCreated, "")
		d, err := time.Parse(time.RFC3339Nano, r.Map(t)["holdExpiresAt"].(string))
		if err != nil {
			t.Fatal(err)
		}
		holds[i] = heldSeat{id: id(t, r, "bookingId"), customer: customer, deadline: d}
	}
	rs := apptest.Race(len(holds), func(i int) *apptest.Response {
		h := holds[i]
		time.Sleep(time.Until(h.deadline.Add(time.Duration(i%5-2) * 10 * time.Millisecond)))
		return apptest.Do(t, procs[i%2].URL, apptest.Request{Method: http.MethodPost, Path: fmt.Sprintf("/bookings/%d/extend", h.id),
			Token: apptest.Token(t, "customer", h.customer, now)})
	})
	time.Sleep(2500 * time.Millisecond) // two sweeps of each process
	pool := pgtest.Open(t, dbURL)
	got := apptest.Answers(rs)
	for i, r := range rs {
		var status string
		var extended bool
		var expires time.Time
		if err := pool.QueryRow(context.Background(), `SELECT status, extended_at IS NOT NULL, hold_expires_at FROM booking WHERE id = $1`,
			holds[i].id).Scan(&status, &extended, &expires); err != nil {
			t.Fatal(err)
		}
		switch {
		case r.Status == http.StatusOK:
			if status != "HELD" || !extended || !expires.Equal(holds[i].deadline.Add(5*time.Minute)) {
				t.Errorf("booking %d: extension answered 200 but it is %s, extended %v, until %s", holds[i].id, status, extended, expires)
			}
		case r.Status == http.StatusConflict && r.Code() == "invalid_state":
			if status != "EXPIRED" || extended {
				t.Errorf("booking %d: extension refused but it is %s, extended %v", holds[i].id, status, extended)
			}
		default:
			t.Errorf("booking %d: extension answered %d %s", holds[i].id, r.Status, r.Body)
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
	bid := id(t, post(s, 1, "/bookings", holdQty(flightID, "ECONOMY", 1)), "bookingId")

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
	answer := make(chan *apptest.Response, 1)
	go func() { answer <- post(s, 1, fmt.Sprintf("/bookings/%d/extend", bid), nil) }()
	select {
	case r := <-answer:
		t.Fatalf("the extension answered %d %s while a join was under way; want it to wait", r.Status, r.Body)
	case <-time.After(500 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	mustStatus(t, "extension after the join", <-answer, http.StatusConflict, "invalid_state")
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}
