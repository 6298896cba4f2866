package booking_test

import (
	"context"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/base"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/config"
)

// The sweeper's next pass is when the earliest hold falls due, within its
// shortest and longest waits: a hold that ran out is swept within about
// MinGap, not up to a whole Interval later, while its seats already read
// free on the seat map and the fare's counters.
func TestSweeperWaitsForTheEarliestHold(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) { c.FlightHoldTTL = ttl }})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: price, Seats: apptest.Seats(10, 12, "ABC")})
	ctx := context.Background()
	sw := booking.NewSweeper(base.Test(s.Clock), s.App.Life, s.App.Pool, time.Hour)
	sw.MinGap = time.Second

	if got := sw.UntilNext(ctx); got != time.Hour {
		t.Fatalf("no hold: waits %v, want the interval 1h", got)
	}
	start := s.Clock.Now()
	s.Customer(1).HoldSeats(t, flightID, "ECONOMY", "10A")
	s.Clock.Set(start.Add(2 * time.Minute))
	s.Customer(2).HoldSeats(t, flightID, "ECONOMY", "10B")

	steps := []struct {
		at       time.Duration // the clock, from the first hold
		interval time.Duration
		want     time.Duration
	}{
		{0, time.Hour, ttl}, // the first hold falls due in ttl
		{ttl - 3*time.Second, time.Hour, 3 * time.Second},    // shortly before it does
		{ttl - 300*time.Millisecond, time.Hour, time.Second}, // never sooner than MinGap
		{ttl + time.Minute, time.Hour, time.Second},          // overdue: at once, after MinGap
		{0, 30 * time.Second, 30 * time.Second},              // never later than the interval
	}
	for _, st := range steps {
		s.Clock.Set(start.Add(st.at))
		sw.Interval = st.interval
		if got := sw.UntilNext(ctx); got != st.want {
			t.Errorf("clock at hold+%v, interval %v: waits %v, want %v", st.at, st.interval, got, st.want)
		}
	}

	// Once the first is swept, the second hold sets the wait.
	s.Clock.Set(start.Add(ttl))
	sw.Interval = time.Hour
	if n, err := sw.Pass(ctx); err != nil || n != 1 {
		t.Fatalf("sweep: %d expired, %v; want 1", n, err)
	}
	if got := sw.UntilNext(ctx); got != 2*time.Minute {
		t.Errorf("after the sweep: waits %v, want 2m (the second hold)", got)
	}
}
