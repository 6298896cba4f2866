package flight_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/pg/pgtest"
)

type counters struct{ sold, held int }

func fareCounters(t *testing.T, pool *pgxpool.Pool, flightID int64, class string) counters {
	t.Helper()
	var c counters
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(sum(sold), 0), coalesce(sum(held), 0) FROM fare_bucket
		WHERE flight_id = $1 AND fare_class = $2`, flightID, class).Scan(&c.sold, &c.held); err != nil {
		t.Fatal(err)
	}
	return c
}

// The classic seat race, harder: 200 customers release together to hold the same
// seat through two berth processes sharing one database. Exactly one wins.
func TestOneSeatTwoHundredBuyersTwoProcesses(t *testing.T) {
	t.Parallel()
	for _, protect := range []string{"on", "off"} {
		t.Run("protect="+protect, func(t *testing.T) {
			t.Parallel()
			testOneSeatTwoProcesses(t, protect)
		})
	}
}

func testOneSeatTwoProcesses(t *testing.T, protect string) {
	dbURL := pgtest.NewURL(t)
	a := apptest.StartProcess(t, dbURL, "BERTH_DB_MAX_CONNS=20", "BERTH_PROTECT="+protect)
	b := apptest.StartProcess(t, dbURL, "BERTH_DB_MAX_CONNS=20", "BERTH_PROTECT="+protect)
	now := time.Now()
	admin := apptest.Token(t, "admin", 1, now)
	flightID := apptest.CreateFlight(t, a.URL, admin, now.Add(72*time.Hour),
		apptest.Fare{Class: "ECONOMY", Price: 1_500_000, Seats: apptest.Seats(10, 14, "ABCDEF")})

	const buyers = 200
	clients := make([]apptest.Client, buyers)
	for i := range clients {
		clients[i] = apptest.Client{Base: a.URL, Token: apptest.Token(t, "customer", int64(1000+i), now)}
		if i%2 == 1 {
			clients[i].Base = b.URL
		}
	}
	rs := apptest.Race(buyers, func(i int) apptest.Attempt {
		return apptest.Try(clients[i].TryHoldSeats(t, flightID, "ECONOMY", "12A"))
	})
	got := apptest.Tally(rs)
	if got["ok"] != 1 || got["409 seat_unavailable"] != buyers-1 {
		t.Fatalf("answers = %v, want exactly one hold and %d 409 seat_unavailable", got, buyers-1)
	}

	pool := pgtest.Open(t, dbURL)
	var winner int64
	for _, r := range rs {
		if r.Problem == nil {
			winner = r.View.BookingID
		}
	}
	var status string
	var owner int64
	if err := pool.QueryRow(context.Background(), `SELECT status, booking_id FROM seat WHERE flight_id = $1 AND seat_no = '12A'`,
		flightID).Scan(&status, &owner); err != nil {
		t.Fatal(err)
	}
	if status != "HELD" || owner != winner {
		t.Errorf("seat 12A is %s for booking %d, want HELD for the winner %d", status, owner, winner)
	}
	var bookings int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM booking WHERE flight_id = $1`, flightID).Scan(&bookings); err != nil {
		t.Fatal(err)
	}
	if bookings != 1 {
		t.Errorf("%d bookings stored, want 1", bookings)
	}
	if c := fareCounters(t, pool, flightID, "ECONOMY"); c != (counters{held: 1}) {
		t.Errorf("counters = %+v, want held 1", c)
	}
	apptest.MustAudit(t, pool, time.Now())
}

// Two group holds that share a seat, sent with their seats in opposite
// orders, many rounds: never a partial hold, never a deadlock.
func TestOverlappingGroupHoldsNeverPartialNeverDeadlock(t *testing.T) {
	t.Parallel()
	modes(t, testOverlappingGroups)
}

func testOverlappingGroups(t *testing.T, o apptest.Options) {
	s := apptest.Start(t, o)
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 12, "ABC")})
	pool := s.App.Pool
	ctx := context.Background()
	deadlocks := func() int64 {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := deadlocks()
	groups := [][]string{{"12B", "12A"}, {"12B", "12C"}, {"12A", "12B"}, {"12C", "12B"}}
	const rounds = 40
	for round := range rounds {
		rs := apptest.Race(len(groups), func(i int) apptest.Attempt {
			return apptest.Try(s.Customer(int64(10+i)).TryHoldSeats(t, flightID, "ECONOMY", groups[i]...))
		})
		winners := 0
		for i, r := range rs {
			switch {
			case r.Problem == nil:
				winners++
				want := slices.Clone(groups[i])
				slices.Sort(want)
				if !slices.Equal(r.View.Seats, want) {
					t.Fatalf("round %d: booking holds %v, want %v", round, r.View.Seats, want)
				}
			case r.Problem.Is(http.StatusConflict, "seat_unavailable"):
			default:
				t.Fatalf("round %d: group %v got %s", round, groups[i], r.Problem)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d groups won, want exactly 1 (they all share 12B)", round, winners)
		}
		// Every held seat belongs to the one winning booking: no partial hold.
		twoSeatsHeldByOneBooking(t, pool, flightID, round)
		for _, r := range rs {
			if r.Problem == nil {
				s.Customer(r.View.CustomerID).Cancel(t, r.View.BookingID)
			}
		}
	}
	if d := deadlocks() - before; d != 0 {
		t.Errorf("PostgreSQL detected %d deadlocks; seats must be locked in one order", d)
	}
	apptest.MustAudit(t, pool, s.Clock.Now())
}

// modes runs f as two subtests: with the surge layers (holds coalesced
// into shared transactions) and without (one transaction per hold). The
// rules must hold in both.
func modes(t *testing.T, f func(t *testing.T, o apptest.Options)) {
	for _, protect := range []bool{true, false} {
		name := "protect=off"
		if protect {
			name = "protect=on"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, apptest.Options{Config: func(c *config.Config) { c.Protect = protect }})
		})
	}
}

// A class of capacity 5 with an overbooking limit of 1 sells exactly 6,
// however many ask at once, whether its counter is one row or split into
// buckets.
func TestQuotaWithOverbookingExactUnderContention(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, o apptest.Options) {
		for _, buckets := range []int{1, 4} {
			testQuotaExact(t, o, buckets)
		}
	})
}

func testQuotaExact(t *testing.T, o apptest.Options, buckets int) {
	s := apptest.Start(t, o)
	flightID := s.CreateFlight(t,
		apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 5, OverbookLimit: 1, Buckets: buckets},
		apptest.Fare{Class: "BUSINESS", Price: 5000, Seats: apptest.Seats(1, 1, "AB"), Buckets: buckets})
	rs := apptest.Race(50, func(i int) apptest.Attempt {
		return apptest.Try(s.Customer(int64(100+i)).TryHoldQuantity(t, flightID, "ECONOMY", 1))
	})
	got := apptest.Tally(rs)
	if got["ok"] != 6 || got["409 sold_out"] != 44 {
		t.Fatalf("answers = %v, want 6 holds and 44 409 sold_out", got)
	}
	if c := fareCounters(t, s.App.Pool, flightID, "ECONOMY"); c != (counters{held: 6}) {
		t.Errorf("counters = %+v, want held 6", c)
	}
	// A group that does not fit whole is refused whole.
	if _, p := s.Customer(7).TryHoldQuantity(t, flightID, "BUSINESS", 3); !p.Is(http.StatusConflict, "sold_out") {
		t.Errorf("3 of 2 business seats: %v, want 409 sold_out", p)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}

// Two seats held as a group where one is taken: neither is held.
func TestGroupHoldIsAllOrNothing(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(20, 21, "ABC")})
	s.Customer(1).HoldSeats(t, flightID, "ECONOMY", "20C")
	if _, p := s.Customer(2).TryHoldSeats(t, flightID, "ECONOMY", "20A", "20B", "20C"); !p.Is(http.StatusConflict, "seat_unavailable") {
		t.Fatalf("overlapping group: %v, want 409 seat_unavailable", p)
	}
	var held int
	if err := s.App.Pool.QueryRow(context.Background(), `SELECT count(*) FROM seat WHERE flight_id = $1 AND status <> 'AVAILABLE'`,
		flightID).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 1 {
		t.Errorf("%d seats taken, want only the first customer's 20C", held)
	}
	if c := fareCounters(t, s.App.Pool, flightID, "ECONOMY"); c != (counters{held: 1}) {
		t.Errorf("counters = %+v, want held 1", c)
	}
	// One seat is named as one.
	if _, p := s.Customer(3).TryHoldSeats(t, flightID, "ECONOMY", "20C"); !p.Is(http.StatusConflict, "seat_unavailable") || p.Detail != "seat 20C is held or sold" {
		t.Errorf("one taken seat: %v, want 409 seat_unavailable \"seat 20C is held or sold\"", p)
	}
}

// twoSeatsHeldByOneBooking fails t unless exactly two seats of the flight
// are held, both by one booking: the winning group, and no partial hold.
func twoSeatsHeldByOneBooking(t *testing.T, pool *pgxpool.Pool, flightID int64, round int) {
	t.Helper()
	var heldSeats, owners int
	if err := pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT booking_id) FROM seat WHERE flight_id = $1 AND status = 'HELD'`,
		flightID).Scan(&heldSeats, &owners); err != nil {
		t.Fatal(err)
	}
	if heldSeats != 2 || owners != 1 {
		t.Fatalf("round %d: %d seats held by %d bookings, want 2 by 1", round, heldSeats, owners)
	}
}

// Seat holds and quantity holds of one class, released together on one
// flight whose quota is split into buckets too small for a quantity hold:
// every quantity hold that wins moves share between buckets, nothing is
// sold twice or past the quota, and the counters match the bookings.
func TestMixedSeatAndQuantityHoldsMoveShareUnderContention(t *testing.T) {
	t.Parallel()
	modes(t, testMixedHolds)
}

func testMixedHolds(t *testing.T, o apptest.Options) {
	s := apptest.Start(t, o)
	// 12 seats, 6 buckets of 2: a quantity of 3 fits no bucket alone.
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(1, 2, "ABCDEF"), Buckets: 6})
	pairs := [][]string{{"1A", "1B"}, {"1C", "1D"}, {"1E", "1F"}}
	const buyers = 40
	rs := apptest.Race(buyers, func(i int) apptest.Attempt {
		c := s.Customer(int64(100 + i))
		if i%2 == 0 {
			return apptest.Try(c.TryHoldSeats(t, flightID, "ECONOMY", pairs[i/2%len(pairs)]...))
		}
		return apptest.Try(c.TryHoldQuantity(t, flightID, "ECONOMY", 3))
	})
	seatWins, qtyWins := 0, 0
	for i, r := range rs {
		switch {
		case r.Problem == nil && i%2 == 0:
			seatWins++
		case r.Problem == nil:
			qtyWins++
		case r.Problem.Is(http.StatusConflict, "seat_unavailable") || r.Problem.Is(http.StatusConflict, "sold_out"):
		default:
			t.Fatalf("hold %d: %v", i, r.Problem)
		}
	}
	// At most the three pairs go by seat (6 units): at least 6 units are
	// left for quantity holds, each of which needs share moved.
	if seatWins > len(pairs) || qtyWins < 2 || 2*seatWins+3*qtyWins > 12 {
		t.Errorf("%d seat holds and %d quantity holds won; want at most 3, at least 2, at most 12 units", seatWins, qtyWins)
	}
	pool := s.App.Pool
	var held, units, quota, heldSeats, seatUnits int
	if err := pool.QueryRow(context.Background(), `SELECT
			(SELECT sum(held) FROM fare_bucket WHERE flight_id = $1),
			(SELECT sum(quota) FROM fare_bucket WHERE flight_id = $1),
			(SELECT coalesce(sum(quantity), 0) FROM booking WHERE flight_id = $1 AND status = 'HELD'),
			(SELECT count(*) FROM seat s JOIN booking b ON b.id = s.booking_id AND s.seat_no = ANY (b.seats)
				WHERE s.flight_id = $1 AND s.status = 'HELD' AND b.status = 'HELD'),
			(SELECT coalesce(sum(cardinality(seats)), 0) FROM booking WHERE flight_id = $1 AND status = 'HELD')`,
		flightID).Scan(&held, &quota, &units, &heldSeats, &seatUnits); err != nil {
		t.Fatal(err)
	}
	if held != 2*seatWins+3*qtyWins || units != held || quota != 12 || heldSeats != 2*seatWins || seatUnits != heldSeats {
		t.Errorf("held %d, booked units %d, quota %d, seats held %d of %d booked; want %d units, quota 12, %d seats",
			held, units, quota, heldSeats, seatUnits, 2*seatWins+3*qtyWins, 2*seatWins)
	}
	apptest.MustAudit(t, pool, s.Clock.Now())
}
