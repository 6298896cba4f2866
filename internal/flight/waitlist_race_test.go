package flight_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/pg/pgtest"
)

// The race: 50 customers cancel at once through two berth
// processes while 20 entries of 1, 2 or 3 units wait and 20 walk-ins try
// to hold. Every freed unit is offered exactly once: each entry gets one
// offer of its whole quantity, walk-ins get nothing while the line waits,
// the quota is never exceeded, and the audit holds. With 4 counter buckets
// the releases also deadlock on each other's buckets now and then, and the
// retried transaction must still offer exactly once.
func TestWaitlistFiftyCancelTwentyWaitTwoProcesses(t *testing.T) {
	t.Parallel()
	for _, buckets := range []int{1, 4} {
		t.Run(fmt.Sprintf("buckets=%d", buckets), func(t *testing.T) {
			t.Parallel()
			testWaitlistRace(t, buckets)
		})
	}
}

func testWaitlistRace(t *testing.T, buckets int) {
	dbURL := pgtest.NewURL(t)
	a := apptest.StartProcess(t, dbURL, "BERTH_DB_MAX_CONNS=20")
	b := apptest.StartProcess(t, dbURL, "BERTH_DB_MAX_CONNS=20")
	now := time.Now()
	admin := apptest.Token(t, "admin", 1, now)
	flightID := apptest.CreateFlight(t, a.URL, admin, now.Add(72*time.Hour),
		apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 34, "AB"), Buckets: buckets})
	base := func(i int) string {
		if i%2 == 1 {
			return b.URL
		}
		return a.URL
	}
	customer := func(i int, id int64) apptest.Client {
		return apptest.Client{Base: base(i), Token: apptest.Token(t, "customer", id, now)}
	}

	const holders, waiting, walkIns = 50, 20, 20
	bookings := make([]int64, holders)
	for i := range holders {
		bookings[i] = customer(i, int64(1000+i)).HoldQuantity(t, flightID, "ECONOMY", 1).BookingID
	}
	wanted := 0
	for i := range waiting {
		q := i%3 + 1
		wanted += q
		customer(i, int64(2000+i)).JoinWaitlist(t, flightID, "ECONOMY", q)
	}

	rs := apptest.Race(holders+walkIns, func(i int) apptest.Attempt {
		if i < holders {
			return apptest.Try(customer(i, int64(1000+i)).TryCancel(t, bookings[i]))
		}
		return apptest.Try(customer(i, int64(3000+i)).TryHoldQuantity(t, flightID, "ECONOMY", 1))
	})
	cancels, walkInsHeld := apptest.Tally(rs[:holders]), apptest.Tally(rs[holders:])
	if cancels["ok"] != holders {
		t.Fatalf("cancellations = %v, want %d 200", cancels, holders)
	}

	pool := pgtest.Open(t, dbURL)
	ctx := context.Background()
	var offered, offeredUnits, stillWaiting, distinctBookings, liveOffers int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE w.status = 'OFFERED'),
			coalesce(sum(bk.quantity) FILTER (WHERE w.status = 'OFFERED' AND bk.quantity = w.quantity AND bk.status = 'HELD'), 0),
			count(*) FILTER (WHERE w.status = 'WAITING'), count(DISTINCT w.booking_id),
			count(*) FILTER (WHERE bk.status = 'HELD')
		FROM waitlist w LEFT JOIN booking bk ON bk.id = w.booking_id WHERE w.flight_id = $1`, flightID).
		Scan(&offered, &offeredUnits, &stillWaiting, &distinctBookings, &liveOffers); err != nil {
		t.Fatal(err)
	}
	c := fareCounters(t, pool, flightID, "ECONOMY")
	t.Logf("buckets=%d: %d cancelled, %d entries offered %d units (%d distinct bookings), walk-ins %v, counters %+v",
		buckets, cancels["ok"], offered, offeredUnits, distinctBookings, walkInsHeld, c)
	if offered != waiting || offeredUnits != wanted || distinctBookings != waiting || liveOffers != waiting || stillWaiting != 0 {
		t.Errorf("%d of %d entries offered (%d units of %d, %d distinct live bookings), %d still waiting",
			offered, waiting, offeredUnits, wanted, distinctBookings, stillWaiting)
	}
	var offersMade int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox o JOIN booking bk ON bk.id = o.booking_id
		WHERE o.type = 'waitlist.offered' AND bk.flight_id = $1`, flightID).Scan(&offersMade); err != nil {
		t.Fatal(err)
	}
	if offersMade != waiting {
		t.Errorf("%d waitlist.offered events, want %d", offersMade, waiting)
	}
	// Walk-ins only ever get units no entry was waiting for.
	if c.held != wanted+walkInsHeld["ok"] || c.held > holders || walkInsHeld["ok"] > holders-wanted {
		t.Errorf("held %d, want the %d offered units plus %d walk-ins, at most %d", c.held, wanted, walkInsHeld["ok"], holders)
	}
	apptest.MustAudit(t, pool, time.Now())
}
