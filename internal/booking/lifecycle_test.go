package booking_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/payment/paytest"
	"berth.dev/berth/internal/pg"
)

func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}

// ttl and extension are the test server's BERTH_FLIGHT_HOLD_TTL and the
// extension these tests ask for.
const (
	ttl       = 10 * time.Minute
	extension = 5 * time.Minute
	price     = 1_000_000
)

// The states a case starts from, each reached through the lifecycle from a
// fresh hold at the case's start.
const (
	fromHeld      = "HELD"
	fromExtended  = "HELD, extended once"
	fromRanOut    = "HELD, ran out, not swept"
	fromExpired   = "EXPIRED (swept)"
	fromConfirmed = "CONFIRMED"
	fromCancelled = "CANCELLED"
)

// The actions, each the service call that makes it.
const (
	pay    = "pay"    // a charge of the full amount succeeded: Lifecycle.Confirm
	sweep  = "sweep"  // a sweeper pass: Sweeper.Pass
	cancel = "cancel" // the customer cancels: Lifecycle.Cancel
	extend = "extend" // the customer extends: Lifecycle.Extend
	read   = "read"   // the customer reads it: booking.Get
)

// Each transition of the booking lifecycle, allowed and forbidden, at the
// service level with the fake clock: the state a booking starts from, how
// far the clock moves from the hold's start before the action, and the
// state the booking then reads (booking.Get at the clock's time) or the
// error the action returns, which changes nothing. A forbidden action must
// leave the booking as it was; the audit holds at the end.
func TestLifecycleTransitions(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) { c.FlightHoldTTL = ttl }})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: price, Seats: apptest.Seats(10, 39, "ABCDEF")})
	ctx := context.Background()
	life, pool := s.App.Life, s.App.Pool

	cases := []struct {
		from    string
		action  string
		advance time.Duration // from the hold, before the action
		want    booking.Status
		code    fault.Code // the action's error; "" when it succeeds
		refund  int64      // the refund a cancellation records
	}{
		{fromHeld, pay, 0, booking.Confirmed, "", 0},
		{fromHeld, pay, ttl - time.Microsecond, booking.Confirmed, "", 0},
		{fromHeld, pay, ttl, booking.Expired, fault.HoldExpired, 0},
		{fromHeld, sweep, ttl - time.Microsecond, booking.Held, "", 0},
		{fromHeld, sweep, ttl, booking.Expired, "", 0},
		{fromHeld, read, ttl - time.Microsecond, booking.Held, "", 0},
		{fromHeld, read, ttl, booking.Expired, "", 0},
		{fromHeld, cancel, 0, booking.Cancelled, "", 0},
		{fromHeld, cancel, ttl - time.Microsecond, booking.Cancelled, "", 0},
		{fromHeld, cancel, ttl, booking.Expired, fault.InvalidState, 0},
		{fromHeld, extend, ttl - time.Microsecond, booking.Held, "", 0},
		{fromHeld, extend, ttl, booking.Expired, fault.InvalidState, 0},

		{fromExtended, extend, 0, booking.Held, fault.InvalidState, 0},
		{fromExtended, sweep, ttl, booking.Held, "", 0},
		{fromExtended, pay, ttl + extension - time.Microsecond, booking.Confirmed, "", 0},
		{fromExtended, sweep, ttl + extension, booking.Expired, "", 0},

		{fromRanOut, sweep, ttl, booking.Expired, "", 0},
		{fromRanOut, pay, ttl, booking.Expired, fault.HoldExpired, 0},
		{fromRanOut, cancel, ttl, booking.Expired, fault.InvalidState, 0},
		{fromRanOut, extend, ttl, booking.Expired, fault.InvalidState, 0},

		{fromExpired, pay, ttl, booking.Expired, fault.InvalidState, 0},
		{fromExpired, cancel, ttl, booking.Expired, fault.InvalidState, 0},
		{fromExpired, extend, ttl, booking.Expired, fault.InvalidState, 0},
		{fromExpired, sweep, ttl, booking.Expired, "", 0},

		{fromConfirmed, cancel, 0, booking.Cancelled, "", price},
		{fromConfirmed, sweep, ttl, booking.Confirmed, "", 0},
		{fromConfirmed, read, ttl, booking.Confirmed, "", 0},
		{fromConfirmed, pay, 0, booking.Confirmed, fault.InvalidState, 0},
		{fromConfirmed, extend, 0, booking.Confirmed, fault.InvalidState, 0},

		{fromCancelled, cancel, 0, booking.Cancelled, fault.InvalidState, 0},
		{fromCancelled, pay, 0, booking.Cancelled, fault.InvalidState, 0},
		{fromCancelled, extend, 0, booking.Cancelled, fault.InvalidState, 0},
		{fromCancelled, sweep, ttl, booking.Cancelled, "", 0},
	}
	seats := apptest.Seats(10, 39, "ABCDEF")
	if len(cases) > len(seats) {
		t.Fatalf("%d cases, %d seats", len(cases), len(seats))
	}
	for i, c := range cases {
		name := fmt.Sprintf("%s/%s+%s", c.from, c.action, c.advance)
		// Each case has its own hour on the clock, well before the
		// refund cut-off 24 h before departure, and its own seat.
		start := apptest.Epoch.Add(time.Duration(i) * 40 * time.Minute)
		s.Clock.Set(start)
		customer := int64(100 + i)
		caller := auth.Caller{ID: customer, Role: "customer"}
		id := s.Customer(customer).HoldSeats(t, flightID, "ECONOMY", seats[i]).BookingID

		switch c.from {
		case fromExtended:
			if _, err := life.Extend(ctx, pool, caller, id, extension); err != nil {
				t.Fatalf("%s: extend: %v", name, err)
			}
		case fromRanOut:
			s.Clock.Set(start.Add(ttl))
		case fromExpired:
			s.Clock.Set(start.Add(ttl))
			if _, err := s.App.Sweeper.Pass(ctx); err != nil {
				t.Fatalf("%s: sweep: %v", name, err)
			}
		case fromConfirmed:
			if err := confirm(ctx, s, id); err != nil {
				t.Fatalf("%s: confirm: %v", name, err)
			}
		case fromCancelled:
			if _, err := life.Cancel(ctx, pool, caller, id); err != nil {
				t.Fatalf("%s: cancel: %v", name, err)
			}
		}
		before := get(t, s, caller, id)

		s.Clock.Set(start.Add(c.advance))
		var err error
		switch c.action {
		case pay:
			err = confirm(ctx, s, id)
		case sweep:
			_, err = s.App.Sweeper.Pass(ctx)
		case cancel:
			_, err = life.Cancel(ctx, pool, caller, id)
		case extend:
			_, err = life.Extend(ctx, pool, caller, id, extension)
		case read:
		}
		if got := fault.CodeOf(err); got != c.code || (c.code == "" && err != nil) {
			t.Errorf("%s: error %v, want code %q", name, err, c.code)
		}
		after := get(t, s, caller, id)
		if after.Status != c.want {
			t.Errorf("%s: reads %s, want %s", name, after.Status, c.want)
		}
		if c.code != "" && after.Version != before.Version {
			t.Errorf("%s: refused, but the booking changed from version %d to %d", name, before.Version, after.Version)
		}
		if c.action == cancel && c.code == "" {
			if after.RefundAmount == nil || *after.RefundAmount != c.refund {
				t.Errorf("%s: refund %v, want %d", name, after.RefundAmount, c.refund)
			}
		}
		if c.action == extend && c.code == "" && !after.HoldExpiresAt.Equal(start.Add(ttl+extension)) {
			t.Errorf("%s: hold expires at %s, want %s", name, after.HoldExpiresAt, start.Add(ttl+extension))
		}
	}
	apptest.MustAudit(t, pool, s.Clock.Now())
}

// confirm confirms held booking id as a charge.succeeded webhook does, at
// the fake clock's time.
func confirm(ctx context.Context, s *apptest.Server, id int64) error {
	return pg.InTx(ctx, s.App.Pool, func(tx pgx.Tx) error { return paytest.Confirm(ctx, tx, s.App.Life, id) })
}

// get reads booking id as the customer's GET does, at the fake clock's time.
func get(t *testing.T, s *apptest.Server, caller auth.Caller, id int64) *booking.Booking {
	t.Helper()
	b, err := booking.Get(context.Background(), s.App.Pool, caller, id, s.Clock.Now())
	if err != nil {
		t.Fatalf("get booking %d: %v", id, err)
	}
	return b
}
