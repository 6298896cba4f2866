package flight_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/payment/paytest"
)

func seatMap(t *testing.T, s *apptest.Server, flightID int64) map[string]string {
	t.Helper()
	r := s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/flights/%d/seats", flightID)})
	var m struct {
		Seats []struct{ SeatNo, Status string }
	}
	r.JSON(t, &m)
	out := map[string]string{}
	for _, st := range m.Seats {
		out[st.SeatNo] = st.Status
	}
	return out
}

// A quantity booking gets exactly its quantity of seats of its class, all
// or nothing; held seats follow the hold, a confirmed booking's are sold.
func TestAssignSeatsToQuantityHold(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t,
		apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 13, "ABC")},
		apptest.Fare{Class: "BUSINESS", Price: 5000, Seats: apptest.Seats(1, 1, "AB")})
	ctx := context.Background()
	assign := func(customer, booking int64, seats ...string) *apptest.Response {
		return post(s, customer, fmt.Sprintf("/bookings/%d/seats", booking), map[string]any{"seats": seats})
	}
	q := id(t, post(s, 1, "/bookings", holdQty(flightID, "ECONOMY", 2)), "bookingId")
	mustStatus(t, "hold a seat", post(s, 2, "/bookings", hold(flightID, "ECONOMY", "12C")), http.StatusCreated, "")

	mustStatus(t, "another's booking", assign(2, q, "12A", "12B"), http.StatusNotFound, "not_found")
	mustStatus(t, "too few", assign(1, q, "12A"), http.StatusUnprocessableEntity, "validation_failed")
	mustStatus(t, "duplicate", assign(1, q, "12A", "12A"), http.StatusUnprocessableEntity, "validation_failed")
	mustStatus(t, "other class", assign(1, q, "12A", "1A"), http.StatusUnprocessableEntity, "validation_failed")
	mustStatus(t, "no such seat", assign(1, q, "12A", "99A"), http.StatusUnprocessableEntity, "validation_failed")
	mustStatus(t, "one taken", assign(1, q, "12B", "12C"), http.StatusConflict, "seat_unavailable")
	if m := seatMap(t, s, flightID); m["12B"] != "AVAILABLE" {
		t.Errorf("after a refused assignment 12B is %s: not all or nothing", m["12B"])
	}
	r := assign(1, q, "12B", "12A")
	mustStatus(t, "assign", r, http.StatusOK, "")
	if seats := r.Map(t)["seats"]; fmt.Sprint(seats) != "[12A 12B]" {
		t.Errorf("seats = %v, want [12A 12B]", seats)
	}
	if m := seatMap(t, s, flightID); m["12A"] != "HELD" || m["12B"] != "HELD" {
		t.Errorf("seat map after assignment: 12A %s, 12B %s, want HELD", m["12A"], m["12B"])
	}
	mustStatus(t, "assign again", assign(1, q, "13A", "13B"), http.StatusConflict, "invalid_state")
	var until time.Time
	if err := s.App.Pool.QueryRow(ctx, `SELECT held_until FROM seat WHERE flight_id = $1 AND seat_no = '12A'`, flightID).Scan(&until); err != nil {
		t.Fatal(err)
	}
	if want := apptest.Epoch.Add(10 * time.Minute); !until.Equal(want) {
		t.Errorf("12A held until %s, want the hold's deadline %s", until, want)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())

	// A confirmed quantity booking's seats are sold.
	c := id(t, post(s, 3, "/bookings", holdQty(flightID, "ECONOMY", 1)), "bookingId")
	paytest.Pay(t, s, c)
	mustStatus(t, "assign to a confirmed booking", assign(3, c, "13A"), http.StatusOK, "")
	if m := seatMap(t, s, flightID); m["13A"] != "SOLD" {
		t.Errorf("13A is %s, want SOLD", m["13A"])
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())

	// An expired hold gets no seats.
	e := id(t, post(s, 4, "/bookings", holdQty(flightID, "ECONOMY", 1)), "bookingId")
	s.Clock.Advance(11 * time.Minute)
	mustStatus(t, "assign to an expired hold", assign(4, e, "13B"), http.StatusConflict, "invalid_state")
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
				id(t, post(s, 10, "/bookings", holdQty(flightID, "ECONOMY", 2)), "bookingId"),
				id(t, post(s, 11, "/bookings", holdQty(flightID, "ECONOMY", 2)), "bookingId"),
			}
			rs := apptest.Race(len(groups), func(i int) *apptest.Response {
				if i < 2 {
					return post(s, int64(10+i), fmt.Sprintf("/bookings/%d/seats", qty[i]), map[string]any{"seats": groups[i]})
				}
				return post(s, int64(10+i), "/bookings", hold(flightID, "ECONOMY", groups[i]...))
			})
			winners := 0
			for i, r := range rs {
				switch {
				case r.Status == http.StatusOK || r.Status == http.StatusCreated:
					winners++
					want := slices.Clone(groups[i])
					slices.Sort(want)
					if got := fmt.Sprint(r.Map(t)["seats"]); got != fmt.Sprint(want) {
						t.Fatalf("round %d: %v got seats %s", round, groups[i], got)
					}
				case r.Status == http.StatusConflict && r.Code() == "seat_unavailable":
				default:
					t.Fatalf("round %d: %v got %d %s", round, groups[i], r.Status, r.Body)
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
				mustStatus(t, "cancel", s.Do(apptest.Request{Method: http.MethodDelete, Path: fmt.Sprintf("/bookings/%d", b.id),
					Token: s.Token("customer", b.customer)}), http.StatusOK, "")
			}
		}
		if d := deadlocks() - before; d != 0 {
			t.Errorf("PostgreSQL detected %d deadlocks; seats must be locked in one order", d)
		}
	})
}
