package guard_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg/pgtest"
)

// Many buyers of one seat at once: the database is asked once; the gate
// answers the rest. A hold the database refuses releases its keys at once,
// so the next buyer reaches the database; a cancellation frees them too.
func TestSeatGate(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, dbURL, redisURL, prefix, nil)
	// The bare design on the same database: it holds seats behind the
	// gate's back, as another deployment or a lost Redis key would.
	bare := apptest.Start(t, apptest.Options{DatabaseURL: dbURL, Config: func(c *config.Config) { c.Protect = false }})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 14, "ABC")})
	rdb := redisClient(t, redisURL)
	ctx := context.Background()
	gateKey := func(seat string) string { return path("%sseat:{%d}:%s", prefix, flightID, seat) }

	const buyers = 30
	rs := apptest.Race(buyers, func(i int) apptest.Attempt {
		return apptest.Try(s.Customer(int64(100+i)).TryHoldSeats(t, flightID, "ECONOMY", "12A"))
	})
	if got := apptest.Tally(rs); got["ok"] != 1 || got["409 seat_unavailable"] != buyers-1 {
		t.Fatalf("answers = %v, want one 201 and %d 409 seat_unavailable", got, buyers-1)
	}
	if n := dbHolds(t, s); n != 1 {
		t.Errorf("%d holds reached the database, want 1: the gate answers the others", n)
	}
	if n := turnedAway(t, s, "seat_gate"); n != buyers-1 {
		t.Errorf("gate turned away %d, want %d", n, buyers-1)
	}
	// Within the 15 s the database is not asked again; after them it is
	// (and says no itself: the seat is held).
	r := apptest.Try(s.Customer(200).TryHoldSeats(t, flightID, "ECONOMY", "12A"))
	if !r.Problem.Is(http.StatusConflict, "seat_unavailable") || dbHolds(t, s) != 1 {
		t.Errorf("within 15 s: %s with %d database holds, want 409 from the gate", r, dbHolds(t, s))
	}
	s.Clock.Advance(15 * time.Second)
	r = apptest.Try(s.Customer(200).TryHoldSeats(t, flightID, "ECONOMY", "12A"))
	if !r.Problem.Is(http.StatusConflict, "seat_unavailable") || dbHolds(t, s) != 2 {
		t.Errorf("after 15 s: %s with %d database holds, want the database's 409", r, dbHolds(t, s))
	}

	// 12B is held without the gate knowing: the database refuses 12B+12C,
	// and the keys of both are released, so 12C is not blocked.
	bare.Customer(300).HoldSeats(t, flightID, "ECONOMY", "12B")
	before := dbHolds(t, s)
	if r := apptest.Try(s.Customer(301).TryHoldSeats(t, flightID, "ECONOMY", "12B", "12C")); !r.Problem.Is(http.StatusConflict, "seat_unavailable") {
		t.Fatalf("12B+12C with 12B held: %s, want 409 seat_unavailable", r)
	}
	if n, err := rdb.Exists(ctx, gateKey("12B"), gateKey("12C")).Result(); err != nil || n != 0 {
		t.Errorf("%d gate keys left behind after the database refused (err %v), want 0", n, err)
	}
	s.Customer(302).HoldSeats(t, flightID, "ECONOMY", "12C")
	if n := dbHolds(t, s) - before; n != 2 {
		t.Errorf("%d holds reached the database, want 2 (the refused one and 12C)", n)
	}

	// All or none: a group one of whose seats is gated takes no key.
	s.Customer(400).HoldSeats(t, flightID, "ECONOMY", "13A")
	if r := apptest.Try(s.Customer(401).TryHoldSeats(t, flightID, "ECONOMY", "13A", "13B")); !r.Problem.Is(http.StatusConflict, "seat_unavailable") {
		t.Fatalf("13A+13B with 13A gated: %s", r)
	}
	if n, _ := rdb.Exists(ctx, gateKey("13B")).Result(); n != 0 {
		t.Error("13B's key was taken by a group refused for 13A")
	}
	s.Customer(402).HoldSeats(t, flightID, "ECONOMY", "13B")

	// A cancelled hold's seat is free at once, not after the 15 s.
	id := s.Customer(500).HoldSeats(t, flightID, "ECONOMY", "14A").BookingID
	s.Customer(500).Cancel(t, id)
	s.Customer(501).HoldSeats(t, flightID, "ECONOMY", "14A")
	mustAudit(t, s)
}

// A class the database found full is answered sold_out without asking it
// again, for about a second; seats coming back are seen within that time
// (at once through the API's cancellation).
func TestSoldOutHint(t *testing.T) {
	t.Parallel()
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, "", redisURL, prefix, nil)
	flightID := s.CreateFlight(t,
		apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 2},
		apptest.Fare{Class: "BUSINESS", Price: 5000, Capacity: 2})
	first := s.Customer(1).HoldQuantity(t, flightID, "ECONOMY", 1).BookingID
	// Two units do not fit: the database says sold_out for two.
	if r := apptest.Try(s.Customer(2).TryHoldQuantity(t, flightID, "ECONOMY", 2)); !r.Problem.Is(http.StatusConflict, "sold_out") {
		t.Fatalf("2 of 1 left: %s", r)
	}
	// One unit still fits: the hint is about two or more.
	s.Customer(3).HoldQuantity(t, flightID, "ECONOMY", 1)
	if r := apptest.Try(s.Customer(4).TryHoldQuantity(t, flightID, "ECONOMY", 1)); !r.Problem.Is(http.StatusConflict, "sold_out") {
		t.Fatalf("full class: %s", r)
	}
	asked := dbHolds(t, s)
	rs := apptest.Race(20, func(i int) apptest.Attempt {
		return apptest.Try(s.Customer(int64(10+i)).TryHoldQuantity(t, flightID, "ECONOMY", 1))
	})
	if got := apptest.Tally(rs); got["409 sold_out"] != 20 {
		t.Fatalf("20 more buyers: %v, want 20 sold_out", got)
	}
	if n := dbHolds(t, s) - asked; n != 0 {
		t.Errorf("%d of them reached the database, want none: the hint answers", n)
	}
	if n := turnedAway(t, s, "sold_out_hint"); n < 20 {
		t.Errorf("hint turned away %d, want at least 20", n)
	}
	// Another class is not affected.
	s.Customer(40).HoldQuantity(t, flightID, "BUSINESS", 1)

	// A seat comes back behind the API's back (the lifecycle called
	// directly, as the payment webhook or another process would): the hint
	// may still say sold_out, but for no longer than its second.
	if _, err := s.App.Life.Cancel(context.Background(), s.App.Pool, auth.Caller{ID: 1, Role: "customer"}, first); err != nil {
		t.Fatal(err)
	}
	s.Clock.Advance(time.Second)
	second := s.Customer(50).HoldQuantity(t, flightID, "ECONOMY", 1).BookingID

	// Full again, hinted again; a cancellation through the API clears the
	// hint at once.
	if r := apptest.Try(s.Customer(51).TryHoldQuantity(t, flightID, "ECONOMY", 1)); r.Code() != "sold_out" {
		t.Fatalf("full again: %s", r)
	}
	if r := apptest.Try(s.Customer(52).TryHoldQuantity(t, flightID, "ECONOMY", 1)); r.Code() != "sold_out" {
		t.Fatalf("full again: %s", r)
	}
	if c := s.Do(apptest.Request{Method: http.MethodPost, Path: path("/bookings/%d/cancel", second), Token: s.Token("customer", 50)}); c.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", c.Status, c.Body)
	}
	s.Customer(53).HoldQuantity(t, flightID, "ECONOMY", 1)
	mustAudit(t, s)
}

// BERTH_HOLD_LIMIT: the fourth successful hold within the window is
// refused with 429 and Retry-After; holds the database refused do not count.
func TestHoldLimit(t *testing.T) {
	t.Parallel()
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, "", redisURL, prefix, func(c *config.Config) { c.HoldLimit = config.Rate{N: 3, Window: 15 * time.Minute} })
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 12, "ABCDEF")})
	s.Customer(9).HoldSeats(t, flightID, "ECONOMY", "12F")
	s.Clock.Advance(15 * time.Second) // past the gate: the database refuses
	// Customer 1 loses three times (seat taken) and still has three holds.
	asked := dbHolds(t, s)
	for range 3 {
		if r := apptest.Try(s.Customer(1).TryHoldSeats(t, flightID, "ECONOMY", "12F")); r.Code() != "seat_unavailable" {
			t.Fatalf("taken seat: %s", r)
		}
	}
	if n := dbHolds(t, s) - asked; n != 3 {
		t.Fatalf("%d refused holds reached the database, want 3", n)
	}
	for _, seat := range []string{"10A", "10B", "10C"} {
		s.Customer(1).HoldSeats(t, flightID, "ECONOMY", seat)
	}
	var bookings int
	count := func() int {
		if err := s.App.Pool.QueryRow(context.Background(), `SELECT count(*) FROM booking`).Scan(&bookings); err != nil {
			t.Fatal(err)
		}
		return bookings
	}
	n := count()
	r := apptest.Try(s.Customer(1).TryHoldSeats(t, flightID, "ECONOMY", "10D"))
	if !r.Problem.Is(http.StatusTooManyRequests, "rate_limited") {
		t.Fatalf("fourth hold: %s, want 429 rate_limited", r)
	}
	if ra := retryAfter(t, r.Problem.RetryAfter); ra > 15*60 {
		t.Errorf("Retry-After %d s, longer than the window", ra)
	}
	if count() != n {
		t.Error("the refused hold stored a booking")
	}
	// Others are not affected.
	s.Customer(2).HoldSeats(t, flightID, "ECONOMY", "10D")
}

// The hold limit counts holds made, not attempts: a customer the gate
// turned away keeps every hold of the window.
func TestHoldLimitKeepsWhatTheGateTurnedAway(t *testing.T) {
	t.Parallel()
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, "", redisURL, prefix, func(c *config.Config) { c.HoldLimit = config.Rate{N: 3, Window: 15 * time.Minute} })
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 12, "ABCDEF")})
	s.Customer(9).HoldSeats(t, flightID, "ECONOMY", "12F")
	asked := dbHolds(t, s)
	for range 3 {
		if r := apptest.Try(s.Customer(1).TryHoldSeats(t, flightID, "ECONOMY", "12F")); !r.Problem.Is(http.StatusConflict, "seat_unavailable") {
			t.Fatalf("gated seat: %s, want 409 seat_unavailable", r)
		}
		// Past what the process remembers of the key (not of its 15 s):
		// the next attempt is turned away by Redis again.
		s.Clock.Advance(time.Second)
	}
	if n := dbHolds(t, s) - asked; n != 0 {
		t.Fatalf("%d gated holds reached the database, want 0", n)
	}
	for _, seat := range []string{"10A", "10B", "10C"} {
		s.Customer(1).HoldSeats(t, flightID, "ECONOMY", seat)
	}
}

// The hold limit is exact under concurrency: 20 holds of one customer
// released at once through two servers sharing Redis, each for a free seat,
// and exactly the limit's 3 are held; the others get 429 and store nothing.
func TestHoldLimitExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	redisURL, prefix := apptest.SharedRedis(t)
	limit := func(c *config.Config) { c.HoldLimit = config.Rate{N: 3, Window: 15 * time.Minute} }
	servers := []*apptest.Server{start(t, dbURL, redisURL, prefix, limit), start(t, dbURL, redisURL, prefix, limit)}
	flightID := servers[0].CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 13, "ABCDEF")})
	seats := apptest.Seats(10, 13, "ABCDEF")
	const tries = 20
	rs := apptest.Race(tries, func(i int) apptest.Attempt {
		return apptest.Try(servers[i%2].Customer(1).TryHoldSeats(t, flightID, "ECONOMY", seats[i]))
	})
	if got := apptest.Tally(rs); got["ok"] != 3 || got["429 rate_limited"] != tries-3 {
		t.Fatalf("answers = %v, want exactly 3 × 201 and %d × 429 rate_limited", got, tries-3)
	}
	var held int
	if err := servers[0].App.Pool.QueryRow(context.Background(), `SELECT count(*) FROM booking WHERE customer_id = 1`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 3 {
		t.Errorf("customer 1 has %d bookings, want 3", held)
	}
	mustAudit(t, servers[0])
}

// The hold limit counts a customer's car holds too: the car-rental
// customers who block many cars before Tet and never pay.
func TestHoldLimitCoversCars(t *testing.T) {
	t.Parallel()
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, "", redisURL, prefix, func(c *config.Config) { c.HoldLimit = config.Rate{N: 3, Window: 15 * time.Minute} })
	var cars []int64
	for i := range 4 {
		cars = append(cars, s.Host(50).CreateCar(t, apptest.Car{Plate: fmt.Sprintf("30A-%05d", i), Model: "Toyota Vios", City: "HN",
			DailyPrice: 800000, Deposit: 5000000, Currency: "VND", Turnaround: "2h"}).ID)
	}
	from := apptest.Epoch.Add(10 * 24 * time.Hour)
	for _, car := range cars[:3] {
		s.Customer(1).HoldCar(t, car, from, from.Add(48*time.Hour))
	}
	_, p := s.Customer(1).TryHoldCar(t, cars[3], from, from.Add(48*time.Hour))
	if !p.Is(http.StatusTooManyRequests, "rate_limited") {
		t.Fatalf("fourth car hold: %v, want 429 rate_limited", p)
	}
	retryAfter(t, p.RetryAfter)
	s.Customer(2).HoldCar(t, cars[3], from, from.Add(48*time.Hour))
}

// Every route limits each client's requests (by token subject, else by
// address); probes are not limited.
func TestRequestLimit(t *testing.T) {
	t.Parallel()
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, "", redisURL, prefix, func(c *config.Config) { c.RequestLimit = config.Rate{N: 5, Window: time.Minute} })
	list := func(customer int64) *apptest.Response {
		return s.Do(apptest.Request{Method: http.MethodGet, Path: "/bookings", Token: s.Token("customer", customer)})
	}
	for i := range 5 {
		if r := list(1); r.Status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i+1, r.Status, r.Body)
		}
	}
	// Raw requests: the limit is on every route, whatever its answer.
	r := list(1)
	if r.Status != http.StatusTooManyRequests || r.Code() != "rate_limited" {
		t.Fatalf("sixth request: %d %s, want 429 rate_limited", r.Status, r.Body)
	}
	retryAfter(t, r.Header.Get("Retry-After"))
	if r := list(2); r.Status != http.StatusOK {
		t.Errorf("another customer: %d %s", r.Status, r.Body)
	}
	search := func() *apptest.Response {
		return s.Do(apptest.Request{Method: http.MethodGet, Path: "/flights?from=SGN&to=HAN&date=2026-12-03"})
	}
	for i := range 5 {
		if r := search(); r.Status != http.StatusOK {
			t.Fatalf("search %d: %d %s", i+1, r.Status, r.Body)
		}
	}
	if r := search(); r.Status != http.StatusTooManyRequests || r.Code() != "rate_limited" {
		t.Errorf("sixth search from one address: %d %s, want 429", r.Status, r.Body)
	}
	for range 10 {
		if r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/healthz"}); r.Status != http.StatusOK {
			t.Fatalf("healthz limited: %d", r.Status)
		}
	}
}

// A gate key never outlives the hold it protects, whatever the settings:
// with holds of 4 s, a seat whose hold expired is held by the next buyer,
// whether the expired hold was swept first or is reclaimed unswept, and a
// seat the map shows AVAILABLE is never refused by the gate.
func TestSeatGateNeverOutlivesTheHold(t *testing.T) {
	t.Parallel()
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, "", redisURL, prefix, func(c *config.Config) { c.FlightHoldTTL = 4 * time.Second })
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 13, "AB")})
	ctx := context.Background()

	// Reclaimed before the sweeper: 12A's hold expires, the next buyer
	// takes the seat from it.
	s.Customer(1).HoldSeats(t, flightID, "ECONOMY", "12A")
	if r := apptest.Try(s.Customer(2).TryHoldSeats(t, flightID, "ECONOMY", "12A")); !r.Problem.Is(http.StatusConflict, "seat_unavailable") {
		t.Fatalf("12A while held: %s, want 409 seat_unavailable", r)
	}
	s.Clock.Advance(4*time.Second + time.Millisecond)
	if st := seatStatus(t, s, flightID, "12A"); st != "AVAILABLE" {
		t.Fatalf("the map shows 12A %s, want AVAILABLE", st)
	}
	s.Customer(2).HoldSeats(t, flightID, "ECONOMY", "12A")

	// Swept: 13A's hold expires and the sweeper ends it first.
	s.Customer(3).HoldSeats(t, flightID, "ECONOMY", "13A")
	s.Clock.Advance(4*time.Second + time.Millisecond)
	if _, err := s.App.Sweeper.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if st := seatStatus(t, s, flightID, "13A"); st != "AVAILABLE" {
		t.Fatalf("the map shows 13A %s after the sweep, want AVAILABLE", st)
	}
	s.Customer(4).HoldSeats(t, flightID, "ECONOMY", "13A")
	mustAudit(t, s)
}

// The sold-out hint never outlives the first hold of its class to run out:
// once it has, the unit is for sale at once, as every read shows it, the
// sweeper or not (the hold that finds the class full ends the overdue one).
func TestSoldOutHintNeverOutlivesAHold(t *testing.T) {
	t.Parallel()
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, "", redisURL, prefix, func(c *config.Config) { c.FlightHoldTTL = 4 * time.Second })
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 1})
	s.Customer(1).HoldQuantity(t, flightID, "ECONOMY", 1)
	// 0.3 s before the hold runs out, the class is sold out, and hinted.
	s.Clock.Advance(3700 * time.Millisecond)
	for c := range int64(2) {
		if r := apptest.Try(s.Customer(2+c).TryHoldQuantity(t, flightID, "ECONOMY", 1)); !r.Problem.Is(http.StatusConflict, "sold_out") {
			t.Fatalf("while held: %s, want 409 sold_out", r)
		}
	}
	if n := turnedAway(t, s, "sold_out_hint"); n < 1 {
		t.Fatalf("the hint turned away %d, want the second buyer", n)
	}
	// 0.1 s after it ran out (inside the hint's second).
	s.Clock.Advance(400 * time.Millisecond)
	s.Customer(4).HoldQuantity(t, flightID, "ECONOMY", 1)
	mustAudit(t, s)
}

// seatStatus is what the flight's seat map shows for seat.
func seatStatus(t *testing.T, s *apptest.Server, flightID int64, seat string) string {
	t.Helper()
	st := s.Anonymous().SeatMap(t, flightID).Status(seat)
	if st == "" {
		t.Fatalf("seat %s not on the map", seat)
	}
	return st
}

// A burst of one client's requests at once is limited by the limit, not by
// how many came together: the process asks Redis for one lease of the
// client's budget at a time and the requests that came meanwhile spend it.
// (Each taking a twentieth of the burst for itself, twenty requests at once
// used to take it all and leave most of it unspent.)
func TestRequestLimitTakesBurstsAtOnce(t *testing.T) {
	t.Parallel()
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, "", redisURL, prefix, func(c *config.Config) {
		c.RequestLimit = config.Rate{N: 100, Window: time.Minute}
		c.AddressLimit = config.Rate{N: 1000, Window: time.Second}
	})
	g := s.App.Guard
	burst := func(n int, allow func(context.Context, string) error, client string) (ok, limited int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Go(func() {
				<-start
				err := allow(t.Context(), client)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case fault.CodeOf(err) == fault.RateLimited:
					limited++
				default:
					t.Errorf("allow: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		return ok, limited
	}
	// 200 at once from one address, under a burst of 1,000: all pass.
	if ok, limited := burst(200, g.Addresses.Allow, "addr:192.0.2.1"); ok != 200 {
		t.Errorf("200 requests at once under a burst of 1000: %d passed, %d limited; want all", ok, limited)
	}
	// 150 at once from one client, under a burst of 100 a minute: the
	// burst passes (give or take what the minute refills), the rest waits.
	if ok, limited := burst(150, g.Requests.Allow, "cust:1"); ok < 100 || ok > 103 || ok+limited != 150 {
		t.Errorf("150 requests at once under a burst of 100: %d passed, %d limited; want 100", ok, limited)
	}
}

// A release through one process clears the sold-out hint that another
// process keeps in memory at once (Forget's broadcast), not when that copy
// lapses: the other process's clock does not move here, so without the
// broadcast it would say sold_out for ever.
func TestReleaseClearsEveryProcesssHint(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	redisURL, prefix := apptest.SharedRedis(t)
	a := start(t, dbURL, redisURL, prefix, nil)
	b := start(t, dbURL, redisURL, prefix, nil)
	flightID := a.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 1})
	held := a.Customer(1).HoldQuantity(t, flightID, "ECONOMY", 1).BookingID
	if r := apptest.Try(b.Customer(2).TryHoldQuantity(t, flightID, "ECONOMY", 1)); r.Code() != "sold_out" {
		t.Fatalf("full class through b: %s, want sold_out", r)
	}
	if r := apptest.Try(b.Customer(2).TryHoldQuantity(t, flightID, "ECONOMY", 1)); r.Code() != "sold_out" {
		t.Fatalf("full class through b again: %s, want sold_out", r)
	}
	if c := a.Do(apptest.Request{Method: http.MethodPost, Path: path("/bookings/%d/cancel", held), Token: a.Token("customer", 1)}); c.Status != http.StatusOK {
		t.Fatalf("cancel through a: %d %s", c.Status, c.Body)
	}
	apptest.Eventually(t, 5*time.Second, "b sells the unit a's cancellation freed", func() bool {
		r := apptest.Try(b.Customer(3).TryHoldQuantity(t, flightID, "ECONOMY", 1))
		if r.Problem != nil && r.Code() != "sold_out" {
			t.Fatalf("through b after the cancellation: %s", r)
		}
		return r.Problem == nil
	})
}
