package flight_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/booking"
)

// An expired hold's seat shows AVAILABLE and can be held again before the
// sweeper runs; after the sweep the counters equal the live bookings.
func TestExpiredHoldReclaimedBeforeSweep(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 12, "ABC")})
	ctx := context.Background()

	first := s.Customer(1).HoldSeats(t, flightID, "ECONOMY", "12A", "12B")
	firstID, expires := first.BookingID, *first.HoldExpiresAt
	if want := apptest.Epoch.Add(10 * time.Minute); !expires.Equal(want) {
		t.Errorf("holdExpiresAt = %s, want %s (BERTH_FLIGHT_HOLD_TTL 10m on the server's clock)", expires, want)
	}

	seatStatus := func(seat string) string { return s.Anonymous().SeatMap(t, flightID).Status(seat) }
	if got := seatStatus("12A"); got != "HELD" {
		t.Errorf("before expiry 12A is %s, want HELD", got)
	}
	// One microsecond before expiry the seat is still taken.
	s.Clock.Set(expires.Add(-time.Microsecond))
	if _, p := s.Customer(2).TryHoldSeats(t, flightID, "ECONOMY", "12A"); !p.Is(http.StatusConflict, "seat_unavailable") {
		t.Fatalf("hold before expiry: %v, want 409 seat_unavailable", p)
	}
	s.Clock.Set(expires)
	if got := seatStatus("12A"); got != "AVAILABLE" {
		t.Errorf("at expiry 12A is %s, want AVAILABLE", got)
	}
	second := s.Customer(2).HoldSeats(t, flightID, "ECONOMY", "12A")
	// Until the sweep the old booking still counts: the counters err on the
	// safe side (both bookings' units are held).
	if c := fareCounters(t, s.App.Pool, flightID, "ECONOMY"); c != (counters{held: 3}) {
		t.Errorf("before sweep counters = %+v, want held 3", c)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())

	n, err := s.App.Sweeper.Pass(ctx)
	if err != nil || n != 1 {
		t.Fatalf("sweep: expired %d, err %v; want 1", n, err)
	}
	if c := fareCounters(t, s.App.Pool, flightID, "ECONOMY"); c != (counters{held: 1}) {
		t.Errorf("after sweep counters = %+v, want held 1 (the new booking's)", c)
	}
	var firstStatus, seatB string
	var ownerA int64
	if err := s.App.Pool.QueryRow(ctx, `SELECT
			(SELECT status FROM booking WHERE id = $1),
			(SELECT status FROM seat WHERE flight_id = $2 AND seat_no = '12B'),
			(SELECT booking_id FROM seat WHERE flight_id = $2 AND seat_no = '12A')`, firstID, flightID).
		Scan(&firstStatus, &seatB, &ownerA); err != nil {
		t.Fatal(err)
	}
	if firstStatus != "EXPIRED" || seatB != "AVAILABLE" || ownerA != second.BookingID {
		t.Errorf("after sweep: first booking %s, 12B %s, 12A owned by %d; want EXPIRED, AVAILABLE, the new booking",
			firstStatus, seatB, ownerA)
	}
	// The expired booking says so to its owner, and cannot be cancelled.
	if _, p := s.Customer(1).TryCancel(t, firstID); !p.Is(http.StatusConflict, "invalid_state") {
		t.Errorf("cancel an expired booking: %v, want 409 invalid_state", p)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}

// A hold reads EXPIRED from its deadline on, in every answer, before any
// sweeper has run: the moment the seat map shows its seat AVAILABLE and
// another customer can take it, its owner must not read HELD, pay-by link
// and all (issue 14). One microsecond earlier it is still HELD.
func TestExpiredHoldReadsExpiredBeforeSweep(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{}) // the sweeper does not run
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 12, "ABC")})
	alice, bob, admin := s.Customer(1), s.Customer(2), s.Admin()

	held := alice.HoldSeats(t, flightID, "ECONOMY", "12A")
	if held.Status != booking.Held || held.HoldExpiresAt == nil {
		t.Fatalf("hold answered %+v", held)
	}
	deadline := *held.HoldExpiresAt

	s.Clock.Set(deadline.Add(-time.Microsecond))
	if v := alice.GetBooking(t, held.BookingID); v.Status != booking.Held || v.PaymentURL == "" {
		t.Errorf("just before the deadline: %s (paymentUrl %q), want HELD with its paymentUrl", v.Status, v.PaymentURL)
	}

	s.Clock.Set(deadline)
	if got := alice.SeatMap(t, flightID).Status("12A"); got != "AVAILABLE" {
		t.Fatalf("at the deadline the seat map shows 12A %s, want AVAILABLE", got)
	}
	for _, c := range []struct {
		who  string
		read func() booking.View
	}{
		{"GET /bookings/{id} by its customer", func() booking.View { return alice.GetBooking(t, held.BookingID) }},
		{"GET /bookings/{id} by an admin", func() booking.View { return admin.GetBooking(t, held.BookingID) }},
		{"GET /bookings of its customer", func() booking.View { return only(t, alice.Bookings(t, "")) }},
		{"GET /bookings of an admin", func() booking.View { return only(t, admin.Bookings(t, "")) }},
	} {
		v := c.read()
		if v.Status != booking.Expired || v.HoldExpiresAt != nil || v.PaymentURL != "" {
			t.Errorf("%s at the deadline, not swept: %s (holdExpiresAt %v, paymentUrl %q), want EXPIRED without them",
				c.who, v.Status, v.HoldExpiresAt, v.PaymentURL)
		}
	}
	// What it reads is what it is: an expired booking cannot be cancelled
	// or extended (docs/api.md), though the sweeper has not recorded it.
	if _, p := alice.TryCancel(t, held.BookingID); !p.Is(http.StatusConflict, "invalid_state") {
		t.Errorf("cancel at the deadline: %v, want 409 invalid_state", p)
	}
	if _, p := alice.TryExtend(t, held.BookingID); !p.Is(http.StatusConflict, "invalid_state") {
		t.Errorf("extend at the deadline: %v, want 409 invalid_state", p)
	}
	if _, p := alice.TryStartPayment(t, held.BookingID, "late"); !p.Is(http.StatusConflict, "hold_expired") {
		t.Errorf("pay at the deadline: %v, want 409 hold_expired", p)
	}

	// Another customer takes the seat; the old booking stays EXPIRED.
	if v := bob.HoldSeats(t, flightID, "ECONOMY", "12A"); v.Status != booking.Held {
		t.Errorf("bob's hold of 12A: %s, want HELD", v.Status)
	}
	if v := alice.GetBooking(t, held.BookingID); v.Status != booking.Expired {
		t.Errorf("after bob took 12A alice's booking reads %s, want EXPIRED", v.Status)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}

// only returns the one booking of a list.
func only(t *testing.T, list []booking.View) booking.View {
	t.Helper()
	if len(list) != 1 {
		t.Fatalf("%d bookings listed, want 1: %+v", len(list), list)
	}
	return list[0]
}

// Two sweepers running at once expire every booking exactly once.
func TestTwoSweepersExpireEachHoldOnce(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	const holds = 60
	flightID := s.CreateFlight(t,
		apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 19, "ABCDEF")},
		apptest.Fare{Class: "PREMIUM", Price: 2000, Capacity: 100})
	for i := range holds {
		if c := s.Customer(int64(i + 1)); i%2 == 1 {
			c.HoldQuantity(t, flightID, "PREMIUM", 2)
		} else {
			c.HoldSeats(t, flightID, "ECONOMY", fmt.Sprintf("%d%c", 10+i/6, 'A'+i%6))
		}
	}
	s.Clock.Advance(11 * time.Minute)
	other := apptest.Start(t, apptest.Options{DatabaseURL: s.App.Config.DatabaseURL})
	other.Clock.Set(s.Clock.Now())

	var wg sync.WaitGroup
	counts := make([]int, 2)
	errs := make([]error, 2)
	for i, sw := range []*apptest.Server{s, other} {
		wg.Go(func() { counts[i], errs[i] = sw.App.Sweeper.Pass(context.Background()) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("sweep errors: %v, %v", errs[0], errs[1])
	}
	if counts[0]+counts[1] != holds {
		t.Errorf("sweepers expired %d + %d, want %d in all", counts[0], counts[1], holds)
	}
	var expired, events, dupEvents int
	if err := s.App.Pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM booking WHERE status = 'EXPIRED'),
			(SELECT count(*) FROM outbox WHERE type = 'booking.expired'),
			(SELECT count(*) FROM (SELECT booking_id FROM outbox WHERE type = 'booking.expired'
				GROUP BY booking_id HAVING count(*) > 1) d)`).Scan(&expired, &events, &dupEvents); err != nil {
		t.Fatal(err)
	}
	if expired != holds || events != holds || dupEvents != 0 {
		t.Errorf("%d expired, %d events, %d bookings with several; want %d, %d, 0", expired, events, dupEvents, holds, holds)
	}
	for _, class := range []string{"ECONOMY", "PREMIUM"} {
		if c := fareCounters(t, s.App.Pool, flightID, class); c != (counters{}) {
			t.Errorf("%s counters after sweep = %+v, want zero", class, c)
		}
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}

// Cancelling a HELD booking releases its seats at once.
func TestCancelHeldReleasesAtOnce(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(5, 5, "AB")})
	id := s.Customer(1).HoldSeats(t, flightID, "ECONOMY", "5A", "5B").BookingID
	// POST /bookings/{id}/cancel, the other way to cancel than the
	// client's DELETE.
	c := s.Do(apptest.Request{Method: http.MethodPost, Path: fmt.Sprintf("/bookings/%d/cancel", id), Token: s.Token("customer", 1)})
	var v booking.View
	c.JSON(t, &v)
	if c.Status != http.StatusOK || v.Status != booking.Cancelled || v.CancelReason != booking.ByCustomer {
		t.Fatalf("cancel: %d %s", c.Status, c.Body)
	}
	if v.HoldExpiresAt != nil {
		t.Errorf("a cancelled booking shows holdExpiresAt: %s", c.Body)
	}
	s.Customer(2).HoldSeats(t, flightID, "ECONOMY", "5B", "5A")
	if cc := fareCounters(t, s.App.Pool, flightID, "ECONOMY"); cc != (counters{held: 2}) {
		t.Errorf("counters = %+v, want held 2", cc)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}
