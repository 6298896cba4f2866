package app_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paytest"
)

// Every path that gives a booking's seats back tells the one
// BookingReleased hook exactly once, after commit: a cancellation, the
// sweeper's expiry, a failed payment. A duplicate (a second cancel, a
// second sweep, a repeated charge.failed) and a confirmation do not.
func TestEveryReleaseTellsTheHookOnce(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1_000_000, Seats: apptest.Seats(1, 2, "ABC")})
	hold := func(customer int64, seat string) int64 {
		t.Helper()
		return s.Customer(customer).HoldSeats(t, flightID, "ECONOMY", seat).BookingID
	}
	released := func() int {
		t.Helper()
		for _, m := range gathered(t, s.App.Registry, "berth_bookings_released_total") {
			if m.GetLabel()[0].GetValue() == "flight" {
				return int(m.GetCounter().GetValue())
			}
		}
		return 0
	}
	expect := func(step string, want int) {
		t.Helper()
		if got := released(); got != want {
			t.Errorf("after %s: the hook was told %d times, want %d", step, got, want)
		}
	}

	// A cancellation, then the same cancellation again (409, no release).
	cancelled := hold(1, "1A")
	for i, want := range []int{http.StatusOK, http.StatusConflict} {
		r := s.Do(apptest.Request{Method: http.MethodDelete, Path: fmt.Sprintf("/bookings/%d", cancelled), Token: s.Token("customer", 1)})
		if r.Status != want {
			t.Fatalf("cancel %d: %d %s, want %d", i+1, r.Status, r.Body, want)
		}
	}
	expect("a cancellation", 1)

	// A failed payment, its webhook delivered twice.
	failed := hold(2, "1B")
	d := paytest.Charge(t, s.App.Pool, failed)
	for range 2 {
		if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeFailed, d); r.Status != http.StatusOK {
			t.Fatalf("charge.failed: %d %s", r.Status, r.Body)
		}
	}
	expect("a failed payment", 2)

	// A paid hold releases nothing.
	paytest.Pay(t, s, hold(3, "1C"))
	expect("a payment", 2)

	// The sweeper's expiry, then a second pass that finds nothing.
	hold(4, "2A")
	s.Clock.Advance(time.Hour)
	for range 2 {
		if _, err := s.App.Sweeper.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	expect("an expiry", 3)
}
