package rental_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
	"berth.dev/berth/internal/rental"
)

// The car race, harder: 100 customers release together, through
// two berth processes sharing one database, to book the same car for
// periods that all overlap. Exactly one gets it, and every loser is told
// 409 car_unavailable, never 503: 100 requests are not an overload. The
// processes run with the default shed wait (StartProcess's lenient one
// would hide the 503s), and open their whole pool before serving, as for a
// sale: on a machine loaded to ten runnable tasks per core, a new backend
// takes longer than the shed wait's hard bound, and the burst would wait
// for the connections the pool grows by, not for the race.
func TestOneCarHundredCustomersTwoProcesses(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	env := []string{"BERTH_DB_MAX_CONNS=20", "BERTH_DB_MIN_CONNS=20", "BERTH_SHED_WAIT=150ms"}
	a := apptest.StartProcess(t, dbURL, env...)
	b := apptest.StartProcess(t, dbURL, env...)
	now := time.Now()
	c := listCar(t, a.URL, apptest.Token(t, "host", 77, now), 77, "HN", "2h")

	const customers = 100
	clients := make([]apptest.Client, customers)
	for i := range clients {
		clients[i] = apptest.Client{Base: a.URL, Token: apptest.Token(t, "customer", int64(1000+i), now)}
		if i%2 == 1 {
			clients[i].Base = b.URL
		}
	}
	pickup := now.Add(72 * time.Hour).Truncate(time.Hour).In(ict)
	rs := apptest.Race(customers, func(i int) apptest.Attempt {
		// Every period overlaps every other: they start ten minutes apart
		// and last two days.
		from := pickup.Add(time.Duration(i) * 10 * time.Minute)
		return apptest.Try(clients[i].TryHoldCar(t, c.ID, from, from.Add(48*time.Hour)))
	})
	got := apptest.Tally(rs)
	if got["ok"] != 1 || got["409 car_unavailable"] != customers-1 {
		logOtherAnswers(t, rs, "car_unavailable")
		for _, u := range []string{a.URL, b.URL} {
			resp, err := http.Get(u + "/metrics")
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for _, l := range strings.Split(string(body), "\n") {
					if strings.Contains(l, "turned_away") && !strings.HasPrefix(l, "#") {
						t.Logf("%s %s", u, l)
					}
				}
			}
		}
		t.Fatalf("answers = %v, want exactly one hold and %d 409 car_unavailable", got, customers-1)
	}
	var winner int64
	for _, r := range rs {
		if r.Problem == nil {
			winner = r.View.BookingID
		}
	}
	pool := pgtest.Open(t, dbURL)
	var rows, live int
	var liveID int64
	if err := pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE status = 'HELD'),
			coalesce(max(id) FILTER (WHERE status = 'HELD'), 0) FROM booking WHERE car_id = $1`, c.ID).
		Scan(&rows, &live, &liveID); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || live != 1 || liveID != winner {
		t.Errorf("the database has %d bookings of the car, %d held (id %d), want exactly the winner %d", rows, live, liveID, winner)
	}
	var events int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 1 {
		t.Errorf("%d events written, want the winner's booking.held only", events)
	}
	apptest.MustAudit(t, pool, time.Now())
}

// A hold claims its Idempotency-Key in its own transaction. The same key
// sent at once through two processes, thirty times with one body, holds
// once: every answer is that hold (201, the same booking) or 409
// idempotency_key_in_use. Sent twenty times with twenty bodies (periods
// that could all be held), it holds once too: the other bodies get 422
// idempotency_key_reused or 409 in use. Never a 5xx.
func TestOneKeyAtOnceThroughTwoProcessesHoldsOnce(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	env := []string{"BERTH_DB_MAX_CONNS=8", "BERTH_DB_MIN_CONNS=8"}
	procs := []*apptest.Process{apptest.StartProcess(t, dbURL, env...), apptest.StartProcess(t, dbURL, env...)}
	now := time.Now()
	c := listCar(t, procs[0].URL, apptest.Token(t, "host", 79, now), 79, "HN", "2h")
	token := apptest.Token(t, "customer", 3000, now)
	pickup := now.Add(72 * time.Hour).Truncate(time.Hour).In(ict)
	race := func(key string, n int, period func(i int) time.Time) []apptest.Attempt {
		return apptest.Race(n, func(i int) apptest.Attempt {
			cl := apptest.Client{Base: procs[i%2].URL, Token: token}
			from := period(i)
			return apptest.Try(cl.TryHoldCarWithKey(t, key, c.ID, from, from.Add(24*time.Hour)))
		})
	}
	check := func(what string, rs []apptest.Attempt, refusals ...string) (held int64) {
		t.Helper()
		got := apptest.Tally(rs)
		for _, r := range rs {
			if r.Problem == nil {
				if held != 0 && r.View.BookingID != held {
					t.Errorf("%s: two bookings answered, %d and %d", what, held, r.View.BookingID)
				}
				held = r.View.BookingID
			}
		}
		others := 0
		for _, k := range refusals {
			others += got[k]
		}
		if got["ok"] == 0 || got["ok"]+others != len(rs) {
			t.Errorf("%s: %v, want one booking answered, and otherwise only %q", what, got, refusals)
		}
		return held
	}
	held := check("one body", race("same", 30, func(int) time.Time { return pickup }), "409 idempotency_key_in_use")
	mixed := race("mixed", 20, func(i int) time.Time { return pickup.Add(time.Duration(i+2) * 72 * time.Hour) })
	check("twenty bodies", mixed, "409 idempotency_key_in_use", "422 idempotency_key_reused")

	pool := pgtest.Open(t, dbURL)
	var bookings int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM booking WHERE car_id = $1`, c.ID).Scan(&bookings); err != nil {
		t.Fatal(err)
	}
	if bookings != 2 {
		t.Errorf("%d bookings of the car, want 2: one per key", bookings)
	}
	// Afterwards, a repeat through either process gets the stored answer.
	for _, p := range procs {
		cl := apptest.Client{Base: p.URL, Token: token}
		if v, prob := cl.TryHoldCarWithKey(t, "same", c.ID, pickup, pickup.Add(24*time.Hour)); prob != nil || v.BookingID != held {
			t.Errorf("a repeat through %s: booking %d %v, want the stored booking %d", p.URL, v.BookingID, prob, held)
		}
	}
	apptest.MustAudit(t, pool, time.Now())
}

// A crowd racing for one car waits for the car's turns holding no slot of
// the hold lane, so the holds of other cars, asked meanwhile, are not shed:
// with a pool of 4 connections the lane has 16 slots and 16 waiters, and
// 100 customers queued on one car used to keep them all, answering most of
// the crowd and of the other cars' customers 503. Each customer of another
// car gets it; the crowd gets one hold and 99 × 409.
func TestCrowdOnOneCarLeavesTheOtherCarsTheirHolds(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	p := apptest.StartProcess(t, dbURL, "BERTH_DB_MAX_CONNS=4", "BERTH_DB_MIN_CONNS=4", "BERTH_SHED_WAIT=1s")
	now := time.Now()
	host := apptest.Token(t, "host", 78, now)
	crowded := listCar(t, p.URL, host, 78, "HN", "2h")
	const crowd, others = 100, 12
	other := make([]car, others)
	for i := range other {
		other[i] = listCar(t, p.URL, host, 78, "HN", "2h")
	}
	pickup := now.Add(72 * time.Hour).Truncate(time.Hour).In(ict)
	rs := apptest.Race(crowd+others, func(i int) apptest.Attempt {
		cl := apptest.Client{Base: p.URL, Token: apptest.Token(t, "customer", int64(2000+i), now)}
		id := crowded.ID
		if i >= crowd {
			id = other[i-crowd].ID
		}
		return apptest.Try(cl.TryHoldCar(t, id, pickup, pickup.Add(48*time.Hour)))
	})
	if got := apptest.Tally(rs[:crowd]); got["ok"] != 1 || got["409 car_unavailable"] != crowd-1 {
		t.Errorf("the crowd on one car: %v, want one hold and %d 409 car_unavailable", got, crowd-1)
	}
	if got := apptest.Tally(rs[crowd:]); got["ok"] != others {
		t.Errorf("the customers of the other cars: %v, want %d holds", got, others)
	}
	if t.Failed() {
		logOtherAnswers(t, rs, "car_unavailable")
	}
	apptest.MustAudit(t, pgtest.Open(t, dbURL), time.Now())
}

// logOtherAnswers logs each distinct refusal in rs whose code is not
// expected, to explain a failed race.
func logOtherAnswers(t *testing.T, rs []apptest.Attempt, expected string) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range rs {
		if r.Problem != nil && r.Problem.Code != expected && !seen[r.String()] {
			seen[r.String()] = true
			t.Logf("answer: %s", r)
		}
	}
}

// Periods are [from, to): a rental ending at 20:00 and one starting at
// 20:00 do not overlap; with a 2-hour turnaround the next must start at
// 22:00 or later, and the one before must end by 06:00 for an 08:00 pickup.
func TestPeriodsAreHalfOpenAndTurnaroundBlocks(t *testing.T) {
	t.Parallel()
	e := start(t)

	free := e.listCar("HN", "0s")
	e.book(1, free.ID, at(10, 8, 0), at(10, 20, 0))
	if _, p := e.s.Customer(2).TryHoldCar(t, free.ID, at(10, 19, 59), at(11, 8, 0)); !p.Is(http.StatusConflict, "car_unavailable") {
		t.Errorf("19:59 on a car without turnaround: %v, want 409 car_unavailable", p)
	}
	e.book(2, free.ID, at(10, 20, 0), at(11, 8, 0))

	buffered := e.listCar("HN", "2h")
	e.book(1, buffered.ID, at(10, 8, 0), at(10, 20, 0))
	before := snapshot(t, e.pool())
	for _, p := range [][2]time.Time{
		{at(10, 21, 59), at(11, 8, 0)}, // inside the turnaround after 20:00
		{at(10, 20, 0), at(10, 21, 0)}, // a short rental in the turnaround
		{at(9, 20, 0), at(10, 6, 1)},   // its own turnaround runs into 08:00
	} {
		if _, pr := e.s.Customer(2).TryHoldCar(t, buffered.ID, p[0], p[1]); !pr.Is(http.StatusConflict, "car_unavailable") {
			t.Errorf("%s–%s on a car with 2h turnaround: %v, want 409 car_unavailable", p[0], p[1], pr)
		}
	}
	if after := snapshot(t, e.pool()); after != before {
		t.Errorf("refused bookings changed the database: %+v → %+v", before, after)
	}
	e.book(2, buffered.ID, at(10, 22, 0), at(11, 8, 0))
	e.book(3, buffered.ID, at(9, 20, 0), at(10, 6, 0))
	apptest.MustAudit(t, e.pool(), e.s.Clock.Now())
}

// docs/invariants.md race 2: a hold whose time is up, not yet swept, does not block
// a new booking of the same period; the new hold expires it, with its
// event, in its own transaction. A stale hold that is not in the way is
// left to the sweeper.
func TestStaleHoldDoesNotBlockTheCalendar(t *testing.T) {
	t.Parallel()
	e := start(t)
	// Every release is told to the OnReleased hook after its commit; the
	// stale hold expired by the new hold is one.
	var releasedMu sync.Mutex
	var released []int64
	onReleased := e.s.App.Life.OnReleased
	e.s.App.Life.OnReleased = func(ctx context.Context, b *booking.Booking) {
		releasedMu.Lock()
		released = append(released, b.ID)
		releasedMu.Unlock()
		if onReleased != nil {
			onReleased(ctx, b)
		}
	}
	c := e.listCar("HN", "1h")
	stale := e.book(1, c.ID, at(10, 8, 0), at(12, 8, 0))
	elsewhere := e.book(1, c.ID, at(20, 8, 0), at(21, 8, 0))

	e.s.Clock.Advance(15*time.Minute - time.Second)
	if _, p := e.s.Customer(2).TryHoldCar(t, c.ID, at(11, 8, 0), at(13, 8, 0)); !p.Is(http.StatusConflict, "car_unavailable") {
		t.Fatalf("a second before the hold expires: %v, want 409 car_unavailable", p)
	}
	e.s.Clock.Advance(time.Second)
	fresh := e.book(2, c.ID, at(11, 8, 0), at(13, 8, 0))

	if got := e.status(stale); got != "EXPIRED" {
		t.Errorf("the stale hold is %s, want EXPIRED", got)
	}
	if got := e.status(elsewhere); got != "HELD" {
		t.Errorf("the stale hold that was not in the way is %s, want HELD (the sweeper's job)", got)
	}
	if got := e.status(fresh); got != "HELD" {
		t.Errorf("the new booking is %s, want HELD", got)
	}
	releasedMu.Lock()
	if len(released) != 1 || released[0] != stale {
		t.Errorf("OnReleased was told of bookings %v, want the stale hold %d once", released, stale)
	}
	releasedMu.Unlock()
	var events []string
	rows, err := e.pool().Query(context.Background(), `SELECT type || ' ' || (payload->>'status') FROM outbox WHERE booking_id = $1 ORDER BY id`, stale)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		events = append(events, s)
	}
	if strings.Join(events, ", ") != "booking.held HELD, booking.expired EXPIRED" {
		t.Errorf("events of the stale hold = %v, want booking.held then booking.expired", events)
	}
	apptest.MustAudit(t, e.pool(), e.s.Clock.Now())
}

// A car hold reads EXPIRED from its deadline on, to its customer and to
// the car's host, and the host's status filter agrees, before any sweeper
// has run (issue 14).
func TestExpiredCarHoldReadsExpiredBeforeSweep(t *testing.T) {
	t.Parallel()
	e := start(t) // the sweeper does not run
	c := e.listCar("HN", "0s")
	customer, host := e.s.Customer(1), e.s.Host(500)
	held := customer.HoldCar(t, c.ID, at(10, 8, 0), at(11, 8, 0))
	e.s.Clock.Set(*held.HoldExpiresAt)

	if v := customer.GetBooking(t, held.BookingID); v.Status != booking.Expired {
		t.Errorf("the customer reads %s at the deadline, want EXPIRED", v.Status)
	}
	if v := host.GetBooking(t, held.BookingID); v.Status != booking.Expired {
		t.Errorf("the host reads %s at the deadline, want EXPIRED", v.Status)
	}
	if list := host.HostBookings(t, "status=HELD"); len(list) != 0 {
		t.Errorf("GET /host/bookings?status=HELD lists %d bookings at the deadline, want none", len(list))
	}
	if list := host.HostBookings(t, "status=EXPIRED"); len(list) != 1 || list[0].Status != booking.Expired {
		t.Errorf("GET /host/bookings?status=EXPIRED lists %+v at the deadline, want the expired hold", list)
	}
	if got := e.status(held.BookingID); got != "HELD" {
		t.Errorf("stored status %s, want HELD still (nothing swept it)", got)
	}
}

// The sweeper expires car holds like flight holds, once the car inventory
// is registered with the lifecycle.
func TestSweeperExpiresCarHolds(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("HN", "0s")
	id := e.book(1, c.ID, at(10, 8, 0), at(11, 8, 0))
	e.s.Clock.Advance(16 * time.Minute)
	n, err := e.s.App.Sweeper.Pass(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("sweeper pass: %d expired, %v; want 1", n, err)
	}
	if got := e.status(id); got != "EXPIRED" {
		t.Errorf("booking is %s, want EXPIRED", got)
	}
	e.book(2, c.ID, at(10, 8, 0), at(11, 8, 0))
}

func TestIdempotencyKeyRequiredForCars(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("HN", "0s")
	body := map[string]any{"carId": c.ID, "from": at(10, 8, 0).Format(time.RFC3339), "to": at(11, 8, 0).Format(time.RFC3339)}
	before := snapshot(t, e.pool())
	for name, key := range map[string]string{
		"missing":       "",
		"too long":      strings.Repeat("k", 256),
		"not ASCII":     "clé-1",
		"not printable": "key\twith a tab",
	} {
		hdr := map[string]string{}
		if key != "" {
			hdr["Idempotency-Key"] = key
		}
		r := e.s.Do(apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: e.s.Token("customer", 1), Header: hdr, Body: body})
		if r.Status != http.StatusBadRequest || r.Code() != "invalid_request" {
			t.Errorf("%s Idempotency-Key: %d %s, want 400 invalid_request", name, r.Status, r.Body)
		}
	}
	// A body for a car and a flight at once is wrong whatever the key: it
	// is told so, not sent for a key first.
	both := map[string]any{"carId": c.ID, "flightId": 1, "from": body["from"], "to": body["to"]}
	if r := e.s.Do(apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: e.s.Token("customer", 1), Body: both}); r.Status != http.StatusUnprocessableEntity ||
		r.Code() != "validation_failed" || !strings.Contains(string(r.Body), "not both") {
		t.Errorf("car and flight without a key: %d %s, want 422 validation_failed, not both", r.Status, r.Body)
	}
	if after := snapshot(t, e.pool()); after != before {
		t.Errorf("refused bookings changed the database: %+v → %+v", before, after)
	}
	r := e.s.Do(apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: e.s.Token("customer", 1),
		Header: map[string]string{"Idempotency-Key": strings.Repeat("~", 255)}, Body: body})
	if r.Status != http.StatusCreated {
		t.Errorf("a 255-character key: %d %s, want 201", r.Status, r.Body)
	}
}

func TestCarBookingBadInputs(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("HN", "2h")
	e.book(9, c.ID, at(20, 8, 0), at(21, 8, 0)) // something that must stay as it is
	from, to := at(10, 8, 0).Format(time.RFC3339), at(11, 8, 0).Format(time.RFC3339)
	customer := e.s.Token("customer", 1)
	// Raw bodies: each is a car hold the typed client cannot send.
	for _, tc := range []struct {
		name   string
		token  string
		body   any
		status int
		code   string
		field  string
	}{
		{"to before from", customer, map[string]any{"carId": c.ID, "from": to, "to": from}, 422, "validation_failed", "to"},
		{"empty period", customer, map[string]any{"carId": c.ID, "from": from, "to": from}, 422, "validation_failed", "to"},
		{"in the past", customer, map[string]any{"carId": c.ID, "from": apptest.Epoch.Add(-time.Hour).Format(time.RFC3339), "to": to}, 422, "validation_failed", "from"},
		{"from without offset", customer, map[string]any{"carId": c.ID, "from": "2026-12-10T08:00:00", "to": to}, 422, "validation_failed", "from"},
		{"to without offset", customer, map[string]any{"carId": c.ID, "from": from, "to": "2026-12-11T08:00:00"}, 422, "validation_failed", "to"},
		{"missing to", customer, map[string]any{"carId": c.ID, "from": from}, 422, "validation_failed", "to"},
		{"unknown car", customer, map[string]any{"carId": 999999, "from": from, "to": to}, 422, "validation_failed", "carId"},
		{"car id zero", customer, map[string]any{"carId": 0, "from": from, "to": to}, 422, "validation_failed", "carId"},
		{"no car", customer, map[string]any{"from": from, "to": to}, 422, "validation_failed", "carId"},
		{"car and flight", customer, map[string]any{"carId": c.ID, "flightId": 1, "from": from, "to": to}, 422, "validation_failed", "carId"},
		{"longer than 90 days", customer, map[string]any{"carId": c.ID, "from": from, "to": at(10, 8, 0).AddDate(0, 0, 91).Format(time.RFC3339)}, 422, "validation_failed", "to"},
		{"overlaps a booking", customer, map[string]any{"carId": c.ID, "from": at(21, 9, 0).Format(time.RFC3339), "to": at(22, 8, 0).Format(time.RFC3339)}, 409, "car_unavailable", ""},
		{"car id as text", customer, map[string]any{"carId": "1", "from": from, "to": to}, 400, "invalid_request", "carId"},
		{"unknown field", customer, map[string]any{"carId": c.ID, "from": from, "to": to, "deposit": 1}, 400, "invalid_request", ""},
		{"a host", e.s.Token("host", 500), map[string]any{"carId": c.ID, "from": from, "to": to}, 403, "forbidden", ""},
		{"no token", "", map[string]any{"carId": c.ID, "from": from, "to": to}, 401, "unauthenticated", ""},
	} {
		before := snapshot(t, e.pool())
		r := e.s.Do(apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: tc.token,
			Header: map[string]string{"Idempotency-Key": fmt.Sprintf("bad-%d", seq.Add(1))}, Body: tc.body})
		status, code, field := problem(t, r)
		if status != tc.status || code != tc.code || field != tc.field {
			t.Errorf("%s: %d %s field %q (%s), want %d %s field %q", tc.name, status, code, field, r.Body, tc.status, tc.code, tc.field)
		}
		if after := snapshot(t, e.pool()); after != before {
			t.Errorf("%s changed the database: %+v → %+v", tc.name, before, after)
		}
	}
}

// A booking renders its times in the offset the client wrote them in, in
// the answer to the hold and in every later answer; prices come from the
// car.
func TestCarBookingRendersInTheClientsOffset(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("HN", "2h")
	// The answer as sent, to see each field's text and which are absent.
	r := e.s.Do(apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: e.s.Token("customer", 1),
		Header: map[string]string{"Idempotency-Key": apptest.NewKey()},
		Body:   map[string]any{"carId": c.ID, "from": at(10, 8, 0).Format(time.RFC3339), "to": at(11, 20, 0).Format(time.RFC3339)}})
	if r.Status != http.StatusCreated {
		t.Fatalf("book: %d %s", r.Status, r.Body)
	}
	var v map[string]any
	r.JSON(t, &v)
	var held booking.View
	r.JSON(t, &held)
	id := held.BookingID
	if loc := r.Header.Get("Location"); loc != fmt.Sprintf("/bookings/%d", id) {
		t.Errorf("Location = %q", loc)
	}
	want := map[string]any{
		"kind": "car", "status": "HELD", "customerId": 1.0, "carId": float64(c.ID),
		"from": "2026-12-10T08:00:00+07:00", "to": "2026-12-11T20:00:00+07:00",
		"holdExpiresAt": "2026-12-01T16:15:00+07:00", "createdAt": "2026-12-01T16:00:00+07:00",
		"amount": 2_000_000.0, "deposit": 2_000_000.0, "currency": "VND",
		"rentalPrice": 1_600_000.0, // 36 hours: two started days
		"paymentUrl":  fmt.Sprintf("/bookings/%d/payments", id),
	}
	for k, w := range want {
		if v[k] != w {
			t.Errorf("%s = %v, want %v", k, v[k], w)
		}
	}
	for _, k := range []string{"flightId", "seats", "fareClass", "quantity"} {
		if _, ok := v[k]; ok {
			t.Errorf("a car booking has %s", k)
		}
	}
	for who, tok := range map[string]string{"the customer": e.s.Token("customer", 1), "the host": e.s.Token("host", 500)} {
		g := e.s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/bookings/%d", id), Token: tok})
		if g.Status != http.StatusOK {
			t.Fatalf("GET as %s: %d %s", who, g.Status, g.Body)
		}
		m := g.Map(t)
		if m["from"] != want["from"] || m["to"] != want["to"] || m["holdExpiresAt"] != want["holdExpiresAt"] {
			t.Errorf("GET as %s renders %v–%v, hold until %v", who, m["from"], m["to"], m["holdExpiresAt"])
		}
	}
	if g := e.s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/bookings/%d", id), Token: e.s.Token("customer", 2)}); g.Status != http.StatusNotFound {
		t.Errorf("another customer's GET: %d, want 404", g.Status)
	}
	if g := e.s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/bookings/%d", id), Token: e.s.Token("host", 501)}); g.Status != http.StatusNotFound {
		t.Errorf("another host's GET: %d, want 404", g.Status)
	}

	for _, zone := range []*time.Location{time.UTC, time.FixedZone("", -5*3600)} {
		from := at(20, 8, 0).In(zone)
		customer := e.s.Customer(1)
		v := customer.HoldCar(t, c.ID, from, from.Add(24*time.Hour))
		if v.From.Format(time.RFC3339) != from.Format(time.RFC3339) || *v.RentalPrice != 800_000 {
			t.Errorf("booked from %s: from %s, rental price %d", from.Format(time.RFC3339), v.From.Format(time.RFC3339), *v.RentalPrice)
		}
		customer.Cancel(t, v.BookingID)
	}
}

// The car rental refund rule, applied by the server's clock at the moment
// of cancellation: ≥ 72 h before pickup 100 %, ≥ 24 h 50 %, later nothing;
// the host or an admin refunds in full; a car on its trip cannot be
// cancelled.
func TestCancellationRefunds(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("HN", "0s")
	held := e.s.Clock.Now()
	for i, tc := range []struct {
		notice time.Duration
		who    string
		refund float64
		reason string
	}{
		{72 * time.Hour, "customer", 2_000_000, "customer"},
		{71*time.Hour + 59*time.Minute, "customer", 1_000_000, "customer"},
		{24 * time.Hour, "customer", 1_000_000, "customer"},
		{23*time.Hour + 59*time.Minute, "customer", 0, "customer"},
		{time.Hour, "host", 2_000_000, "host"},
		{time.Hour, "admin", 2_000_000, "admin"},
	} {
		e.s.Clock.Set(held)
		pickup := at(10+i, 10, 0)
		id := e.book(1, c.ID, pickup, pickup.Add(24*time.Hour))
		e.confirm(id)
		e.s.Clock.Set(pickup.Add(-tc.notice))
		// Tokens are valid for a day of the fake clock: issue them now.
		tok := map[string]string{"customer": e.s.Token("customer", 1), "host": e.s.Token("host", 500), "admin": e.s.Token("admin", 9)}[tc.who]
		r := e.s.Do(apptest.Request{Method: http.MethodPost, Path: fmt.Sprintf("/bookings/%d/cancel", id), Token: tok})
		if r.Status != http.StatusOK {
			t.Fatalf("%s cancels %s before pickup: %d %s", tc.who, tc.notice, r.Status, r.Body)
		}
		m := r.Map(t)
		if m["status"] != "CANCELLED" || m["refundAmount"] != tc.refund || m["cancelReason"] != tc.reason {
			t.Errorf("%s cancels %s before pickup: %v, refund %v, reason %v; want CANCELLED, %v, %s",
				tc.who, tc.notice, m["status"], m["refundAmount"], m["cancelReason"], tc.refund, tc.reason)
		}
		var requested int64
		err := e.pool().QueryRow(context.Background(), `SELECT coalesce(sum((payload->'refund'->>'amount')::bigint), 0) FROM outbox
			WHERE booking_id = $1 AND type = 'refund.requested'`, id).Scan(&requested)
		if err != nil {
			t.Fatal(err)
		}
		if float64(requested) != tc.refund {
			t.Errorf("%s cancels %s before pickup: refund.requested for %d, want %v", tc.who, tc.notice, requested, tc.refund)
		}
	}

	// After pickup nobody can cancel.
	e.s.Clock.Set(held)
	pickup := at(20, 10, 0)
	id := e.book(1, c.ID, pickup, pickup.Add(24*time.Hour))
	e.confirm(id)
	e.s.Clock.Set(pickup)
	if r := e.s.Do(apptest.Request{Method: http.MethodPost, Path: fmt.Sprintf("/bookings/%d/pickup", id), Token: e.s.Token("host", 500)}); r.Status != http.StatusOK {
		t.Fatalf("pickup: %d %s", r.Status, r.Body)
	}
	for who, tok := range map[string]string{"customer": e.s.Token("customer", 1), "host": e.s.Token("host", 500), "admin": e.s.Token("admin", 1)} {
		before := snapshot(t, e.pool())
		for _, req := range []apptest.Request{
			{Method: http.MethodPost, Path: fmt.Sprintf("/bookings/%d/cancel", id), Token: tok},
			{Method: http.MethodDelete, Path: fmt.Sprintf("/bookings/%d", id), Token: tok},
		} {
			if r := e.s.Do(req); r.Status != http.StatusConflict || r.Code() != "invalid_state" {
				t.Errorf("%s %s on a trip, by the %s: %d %s, want 409 invalid_state", req.Method, req.Path, who, r.Status, r.Body)
			}
		}
		if after := snapshot(t, e.pool()); after != before {
			t.Errorf("refused cancellation changed the database: %+v → %+v", before, after)
		}
	}
	apptest.MustAudit(t, e.pool(), e.s.Clock.Now())
}

// Only the car's host (or an admin) hands it over and takes it back; a
// host cannot touch another host's car, and nobody cancels a trip.
func TestHandOver(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("HN", "2h")
	id := e.book(1, c.ID, at(10, 8, 0), at(13, 8, 0))
	path := func(op string) string { return fmt.Sprintf("/bookings/%d/%s", id, op) }
	refused := func(name string, req apptest.Request, status int, code string) {
		t.Helper()
		before := snapshot(t, e.pool())
		r := e.s.Do(req)
		if r.Status != status || r.Code() != code {
			t.Errorf("%s: %d %s, want %d %s", name, r.Status, r.Body, status, code)
		}
		if after := snapshot(t, e.pool()); after != before {
			t.Errorf("%s changed the database: %+v → %+v", name, before, after)
		}
	}
	refused("pickup of a held booking", apptest.Request{Method: http.MethodPost, Path: path("pickup"), Token: e.s.Token("host", 500)}, 409, "invalid_state")
	e.confirm(id)
	refused("the customer picks up", apptest.Request{Method: http.MethodPost, Path: path("pickup"), Token: e.s.Token("customer", 1)}, 403, "forbidden")
	refused("another host picks up", apptest.Request{Method: http.MethodPost, Path: path("pickup"), Token: e.s.Token("host", 501)}, 404, "not_found")
	refused("another host cancels", apptest.Request{Method: http.MethodPost, Path: path("cancel"), Token: e.s.Token("host", 501)}, 404, "not_found")
	refused("another customer cancels", apptest.Request{Method: http.MethodDelete, Path: fmt.Sprintf("/bookings/%d", id), Token: e.s.Token("customer", 2)}, 404, "not_found")
	refused("return before pickup", apptest.Request{Method: http.MethodPost, Path: path("return"), Token: e.s.Token("host", 500)}, 409, "invalid_state")
	refused("pickup of an unknown booking", apptest.Request{Method: http.MethodPost, Path: "/bookings/999999/pickup", Token: e.s.Token("admin", 1)}, 404, "not_found")

	e.s.Clock.Set(at(10, 8, 0))
	r := e.s.Do(apptest.Request{Method: http.MethodPost, Path: path("pickup"), Token: e.s.Token("host", 500)})
	if r.Status != http.StatusOK || r.Map(t)["status"] != "ON_TRIP" {
		t.Fatalf("pickup: %d %s", r.Status, r.Body)
	}
	refused("pickup twice", apptest.Request{Method: http.MethodPost, Path: path("pickup"), Token: e.s.Token("host", 500)}, 409, "invalid_state")
	// Back a day early: the car is free again from the return on.
	e.s.Clock.Set(at(12, 8, 0))
	r = e.s.Do(apptest.Request{Method: http.MethodPost, Path: path("return"), Token: e.s.Token("admin", 1)})
	if r.Status != http.StatusOK || r.Map(t)["status"] != "COMPLETED" {
		t.Fatalf("return: %d %s", r.Status, r.Body)
	}
	e.book(2, c.ID, at(12, 12, 0), at(13, 12, 0))

	var types []string
	rows, err := e.pool().Query(context.Background(), `SELECT type FROM outbox WHERE booking_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		types = append(types, s)
	}
	if got := strings.Join(types, " "); got != "booking.held booking.confirmed booking.on_trip booking.completed" {
		t.Errorf("events = %s", got)
	}
	var payload []byte
	if err := e.pool().QueryRow(context.Background(), `SELECT payload FROM outbox WHERE booking_id = $1 ORDER BY id DESC LIMIT 1`, id).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var last map[string]any
	if err := json.Unmarshal(payload, &last); err != nil {
		t.Fatal(err)
	}
	if last["status"] != "COMPLETED" || last["carId"] != float64(c.ID) || last["from"] != "2026-12-10T08:00:00+07:00" {
		t.Errorf("the completed event carries %v", last)
	}
	apptest.MustAudit(t, e.pool(), e.s.Clock.Now())
}

// A hold whose request no longer holds its Idempotency-Key (a retry took the
// key over: the key's row has another lease, or is gone) makes nothing: its
// transaction is rolled back with 409 idempotency_key_in_use, no booking is
// left, and the car is still free for the retry.
func TestHoldUnderAKeyTakenOverMakesNothing(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("HN", "0s")
	svc := newService(e.pool(), time.Minute)
	ctx := pg.WithKeyClaim(t.Context(), pg.KeyClaim{CallerID: 4242, Key: "taken-over", Lease: "00000000-0000-4000-8000-000000000000"})
	from := time.Now().Add(72 * time.Hour).Truncate(time.Hour)
	_, err := svc.Hold(ctx, rental.HoldRequest{CustomerID: 4242, CarID: c.ID, From: from, To: from.Add(24 * time.Hour)})
	if !fault.Is(err, fault.IdempotencyKeyInUse) {
		t.Fatalf("hold under a key taken over: %v, want idempotency_key_in_use", err)
	}
	var n int
	if err := e.pool().QueryRow(t.Context(), `SELECT count(*) FROM booking WHERE car_id = $1`, c.ID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d bookings of the car left by a hold that lost its key, want none", n)
	}
	e.book(4243, c.ID, from, from.Add(24*time.Hour))
}
