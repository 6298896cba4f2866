package flight_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/events"
	"berth.dev/berth/internal/payment/paytest"
)

// A quantity booking gets exactly its quantity of seats of its class, all
// or nothing; held seats follow the hold, a confirmed booking's are sold.
func TestAssignSeatsToQuantityHold(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t,
		apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 13, "ABC")},
		apptest.Fare{Class: "BUSINESS", Price: 5000, Seats: apptest.Seats(1, 1, "AB")})
	ctx := context.Background()
	refused := func(what string, p *apptest.Problem, status int, code string) {
		t.Helper()
		if !p.Is(status, code) {
			t.Fatalf("%s: %v, want %d %s", what, p, status, code)
		}
	}
	one, two := s.Customer(1), s.Customer(2)
	q := one.HoldQuantity(t, flightID, "ECONOMY", 2).BookingID
	two.HoldSeats(t, flightID, "ECONOMY", "12C")

	_, p := two.TryAssignSeats(t, q, "12A", "12B")
	refused("another's booking", p, http.StatusNotFound, "not_found")
	_, p = one.TryAssignSeats(t, q, "12A")
	refused("too few", p, http.StatusUnprocessableEntity, "validation_failed")
	_, p = one.TryAssignSeats(t, q, "12A", "12A")
	refused("duplicate", p, http.StatusUnprocessableEntity, "validation_failed")
	_, p = one.TryAssignSeats(t, q, "12A", "1A")
	refused("other class", p, http.StatusUnprocessableEntity, "validation_failed")
	_, p = one.TryAssignSeats(t, q, "12A", "99A")
	refused("no such seat", p, http.StatusUnprocessableEntity, "validation_failed")
	_, p = one.TryAssignSeats(t, q, "12B", "12C")
	refused("one taken", p, http.StatusConflict, "seat_unavailable")
	if st := one.SeatMap(t, flightID).Status("12B"); st != "AVAILABLE" {
		t.Errorf("after a refused assignment 12B is %s: not all or nothing", st)
	}
	if v := one.AssignSeats(t, q, "12B", "12A"); !slices.Equal(v.Seats, []string{"12A", "12B"}) {
		t.Errorf("seats = %v, want [12A 12B]", v.Seats)
	}
	if m := one.SeatMap(t, flightID); m.Status("12A") != "HELD" || m.Status("12B") != "HELD" {
		t.Errorf("seat map after assignment: 12A %s, 12B %s, want HELD", m.Status("12A"), m.Status("12B"))
	}
	_, p = one.TryAssignSeats(t, q, "13A", "13B")
	refused("assign again", p, http.StatusConflict, "invalid_state")
	var until time.Time
	if err := s.App.Pool.QueryRow(ctx, `SELECT held_until FROM seat WHERE flight_id = $1 AND seat_no = '12A'`, flightID).Scan(&until); err != nil {
		t.Fatal(err)
	}
	if want := apptest.Epoch.Add(10 * time.Minute); !until.Equal(want) {
		t.Errorf("12A held until %s, want the hold's deadline %s", until, want)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())

	// A confirmed quantity booking's seats are sold. Its ticket, issued
	// without a seat at the confirmation, gets it: the assignment is a new
	// version of the booking with its event, which the tickets consumer
	// reads.
	three := s.Customer(3)
	c := three.HoldQuantity(t, flightID, "ECONOMY", 1).BookingID
	paytest.Pay(t, s, c)
	ticketSeat := func() string {
		ts, err := events.TicketsOf(ctx, s.App.Pool, c)
		if err != nil || len(ts) != 1 {
			return fmt.Sprintf("%d tickets (%v)", len(ts), err)
		}
		return "seat " + ts[0].SeatNo
	}
	apptest.Eventually(t, 10*time.Second, "the confirmed booking's ticket", func() bool { return ticketSeat() == "seat " })
	if v := three.AssignSeats(t, c, "13A"); v.Version != 3 || v.Status != "CONFIRMED" {
		t.Errorf("seated booking at version %d, %s; want 3 (held, confirmed, seated), CONFIRMED", v.Version, v.Status)
	}
	if st := three.SeatMap(t, flightID).Status("13A"); st != "SOLD" {
		t.Errorf("13A is %s, want SOLD", st)
	}
	var seated int
	if err := s.App.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE booking_id = $1 AND type = 'booking.seats_assigned'
		AND payload->'seats' = '["13A"]' AND (payload->>'version')::int = 3`, c).Scan(&seated); err != nil || seated != 1 {
		t.Errorf("%d booking.seats_assigned events of version 3 with seat 13A (%v), want 1", seated, err)
	}
	apptest.Eventually(t, 10*time.Second, "the ticket gets seat 13A", func() bool { return ticketSeat() == "seat 13A" })
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())

	// An expired hold gets no seats.
	four := s.Customer(4)
	e := four.HoldQuantity(t, flightID, "ECONOMY", 1).BookingID
	s.Clock.Advance(11 * time.Minute)
	_, p = four.TryAssignSeats(t, e, "13B")
	refused("assign to an expired hold", p, http.StatusConflict, "invalid_state")
}

// Seat assignments and group holds of the same seats, each sent in
// opposite orders, race round after round: exactly one wins each round,
// nobody gets part of what they asked for, and PostgreSQL never finds a
// deadlock.
func TestAssignSeatsRacesGroupHolds(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, o apptest.Options) {
		s := apptest.Start(t, o)
		flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 12, "ABC"), OverbookLimit: 6})
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
		groups := [][]string{{"12B", "12A"}, {"12C", "12B"}, {"12A", "12B"}, {"12B", "12C"}}
		const rounds = 25
		for round := range rounds {
			qty := []int64{
				s.Customer(10).HoldQuantity(t, flightID, "ECONOMY", 2).BookingID,
				s.Customer(11).HoldQuantity(t, flightID, "ECONOMY", 2).BookingID,
			}
			rs := apptest.Race(len(groups), func(i int) apptest.Attempt {
				c := s.Customer(int64(10 + i))
				if i < 2 {
					return apptest.Try(c.TryAssignSeats(t, qty[i], groups[i]...))
				}
				return apptest.Try(c.TryHoldSeats(t, flightID, "ECONOMY", groups[i]...))
			})
			winners := 0
			for i, r := range rs {
				switch {
				case r.Problem == nil:
					winners++
					want := slices.Clone(groups[i])
					slices.Sort(want)
					if !slices.Equal(r.View.Seats, want) {
						t.Fatalf("round %d: %v got seats %v", round, groups[i], r.View.Seats)
					}
				case r.Problem.Is(http.StatusConflict, "seat_unavailable"):
				default:
					t.Fatalf("round %d: %v got %s", round, groups[i], r.Problem)
				}
			}
			if winners != 1 {
				t.Fatalf("round %d: %d winners, want exactly 1 (all share 12B)", round, winners)
			}
			twoSeatsHeldByOneBooking(t, pool, flightID, round)
			apptest.MustAudit(t, pool, s.Clock.Now())
			var live []struct{ id, customer int64 }
			rows, err := pool.Query(ctx, `SELECT id, customer_id FROM booking WHERE flight_id = $1 AND status = 'HELD'`, flightID)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var b struct{ id, customer int64 }
				if err := rows.Scan(&b.id, &b.customer); err != nil {
					t.Fatal(err)
				}
				live = append(live, b)
			}
			rows.Close()
			for _, b := range live {
				s.Customer(b.customer).Cancel(t, b.id)
			}
		}
		if d := deadlocks() - before; d != 0 {
			t.Errorf("PostgreSQL detected %d deadlocks; seats must be locked in one order", d)
		}
	})
}
