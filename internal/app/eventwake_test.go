package app_test

import (
	"context"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
)

// A lone hold is one statement that commits by itself: berth never sends a
// COMMIT for it. Its booking.held event must still wake this process's
// relay at once (there is no NOTIFY for a process's own commits), so the
// consumers take it well within the relay's poll interval, set to a minute
// here: before, a quiet day's events waited for the next poll.
func TestLoneHoldWakesTheRelay(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) { c.Events.PollInterval = time.Minute }})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(1, 2, "ABC")})
	// Let start-up's own passes finish, so that only the hold can wake the relay.
	time.Sleep(500 * time.Millisecond)
	id := s.Customer(1).HoldSeats(t, flightID, "ECONOMY", "1A").BookingID
	held := time.Now()
	for {
		var n int
		if err := s.App.Pool.QueryRow(context.Background(), `SELECT count(*) FROM ticket_booking WHERE booking_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			t.Logf("the tickets consumer took the hold %s after its answer", time.Since(held).Round(time.Millisecond))
			return
		}
		if time.Since(held) > 20*time.Second {
			t.Fatal("the hold's event reached no consumer within 20 s: it waits for the relay's poll")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
