package payment_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/payment/paysim"
	"berth.dev/berth/internal/payment/paytest"
)

// A few hundred customers pay through a gateway that is slow, refuses some
// calls, fails half the charges and delivers every webhook one to three
// times in random order; some pay after their hold expired, some of those
// after another customer took their seat. At rest every charge confirmed
// exactly one booking or was refunded exactly once, and the audit passes.
func TestPaymentsThroughAnUnreliableGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, func(c *config.Config) { c.GatewayURL, c.PaySim = "http://"+ln.Addr().String(), false })
	sim := paysim.New(paysim.Options{
		Key: paytest.Key(t), Clock: s.Clock, BaseURL: "http://" + ln.Addr().String(),
		Latency: 5 * time.Millisecond, ErrorShare: 0.05,
		Auto: true, PayDelay: 20 * time.Millisecond, FailShare: 0.5,
		MaxDeliveries: 3, Reorder: 30 * time.Millisecond, RefundDelay: 10 * time.Millisecond,
	})
	hs := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { sim.Close(); _ = hs.Close() })
	pool := s.App.Pool
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const onTime, late, reclaimed = 240, 60, 20
	allSeats := apptest.Seats(1, 55, "ABCDEF")
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: price, Seats: allSeats})
	started := time.Now()

	// payFor holds seat i for customer i and starts paying, twice with one
	// key (the second is a replay); a 503 (gateway out, circuit open) is
	// retried with the same key, as a client would.
	payFor := func(i int) (int64, error) {
		id := hold(t, s, int64(1000+i), flightID, allSeats[i])
		key := fmt.Sprintf("pay-%d", i)
		var first string
		for attempt := 0; ; attempt++ {
			r := pay(s, int64(1000+i), id, key)
			switch {
			case r.Status == http.StatusServiceUnavailable && attempt < 60:
				// The client's own backoff before retrying under the same
				// key (the circuit stays open for its Retry-After).
				time.Sleep(250 * time.Millisecond)
				continue
			case r.Status != http.StatusCreated:
				return id, fmt.Errorf("pay booking %d: %d %s", id, r.Status, r.Body)
			case first == "":
				first = string(r.Body)
				continue
			case string(r.Body) != first:
				return id, fmt.Errorf("replay of booking %d: %s, want %s", id, r.Body, first)
			}
			return id, nil
		}
	}
	run := func(from, to int) []int64 {
		ids := make([]int64, to-from)
		var wg sync.WaitGroup
		work := make(chan int)
		for range 12 {
			wg.Go(func() {
				for i := range work {
					id, err := payFor(i)
					if err != nil {
						t.Error(err)
					}
					ids[i-from] = id
				}
			})
		}
		for i := from; i < to; i++ {
			work <- i
		}
		close(work)
		wg.Wait()
		return ids
	}

	onTimeIDs := run(0, onTime)
	if err := sim.Idle(ctx); err != nil {
		t.Fatal(err)
	}
	// The late ones: the customers pay, but the gateway decides only after
	// their holds expired, and some seats have been re-held meanwhile.
	sim.Configure(func(o *paysim.Options) { o.Auto = false })
	lateIDs := run(onTime, onTime+late)
	s.Clock.Advance(11 * time.Minute)
	for i := range reclaimed {
		hold(t, s, int64(5000+i), flightID, allSeats[onTime+i])
	}
	for _, txn := range sim.PendingCharges() {
		sim.Settle(txn, rand.IntN(3) > 0)
	}
	if err := sim.Idle(ctx); err != nil {
		t.Fatal(err)
	}
	settle(t, s, nil)
	drainRefunds(ctx, t, &paytest.Relay{Pool: pool, Consumer: s.App.Refunds})
	if err := sim.Idle(ctx); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(started)

	st := sim.Stats()
	var payments, confirmedPay, refundedPay, confirmedBookings, failedBookings, confirmedEvents, refunds, doneRefunds int
	q := func(dst *int, sql string, args ...any) {
		if err := pool.QueryRow(ctx, sql, args...).Scan(dst); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	q(&payments, `SELECT count(*) FROM payment`)
	q(&confirmedPay, `SELECT count(*) FROM payment WHERE outcome = 'confirmed'`)
	q(&refundedPay, `SELECT count(*) FROM payment WHERE outcome = 'refund'`)
	q(&confirmedBookings, `SELECT count(*) FROM booking WHERE status = 'CONFIRMED'`)
	q(&failedBookings, `SELECT count(*) FROM booking WHERE cancel_reason = 'payment_failed'`)
	q(&confirmedEvents, `SELECT count(*) FROM outbox WHERE type = $1`, outbox.BookingConfirmed)
	q(&refunds, `SELECT count(*) FROM refund`)
	q(&doneRefunds, `SELECT count(*) FROM refund WHERE status = 'SUCCEEDED'`)
	t.Logf("%d bookings paid in %s: gateway %d charges (%d succeeded, %d failed), %d API calls, %d webhook deliveries; "+
		"berth %d payments (%d confirmed, %d refunded), %d refunds",
		onTime+late, elapsed.Round(time.Millisecond), st.Charges, st.Succeeded, st.Failed, st.APICalls, st.Deliveries,
		payments, confirmedPay, refundedPay, refunds)

	if st.Charges != onTime+late || st.Pending != 0 {
		t.Errorf("gateway: %d charges, %d pending; want %d, 0", st.Charges, st.Pending, onTime+late)
	}
	if payments != st.Succeeded {
		t.Errorf("%d payments recorded for %d successful charges", payments, st.Succeeded)
	}
	if confirmedBookings != confirmedPay || confirmedEvents != confirmedPay {
		t.Errorf("%d confirmed bookings and %d booking.confirmed events for %d confirming charges", confirmedBookings, confirmedEvents, confirmedPay)
	}
	if confirmedPay+refundedPay != payments || refunds != refundedPay || doneRefunds != refunds {
		t.Errorf("%d payments: %d confirmed, %d refunded; %d refunds, %d succeeded", payments, confirmedPay, refundedPay, refunds, doneRefunds)
	}
	if failedBookings == 0 || confirmedPay == 0 || refundedPay == 0 {
		t.Errorf("the mix is missing a case: %d failed, %d confirmed, %d refunded", failedBookings, confirmedPay, refundedPay)
	}
	for txn, n := range st.RefundsPerCharge {
		if n != 1 {
			t.Errorf("charge %s refunded %d times at the gateway", txn, n)
		}
	}
	if len(st.RefundsPerCharge) != refundedPay {
		t.Errorf("the gateway refunded %d charges, berth %d", len(st.RefundsPerCharge), refundedPay)
	}
	// Late money never confirmed anything; the reclaimed seats stayed with
	// their new holders.
	for _, id := range lateIDs {
		if b := getBooking(t, pool, id); b.Status == "CONFIRMED" {
			t.Errorf("late booking %d was confirmed", id)
		}
	}
	for i := range reclaimed {
		if st := seat(t, pool, flightID, allSeats[onTime+i]); st.Status != "HELD" || slices.Contains(lateIDs, st.Booking) {
			t.Errorf("reclaimed seat %s: %+v, want HELD by its new customer", allSeats[onTime+i], st)
		}
	}
	// Paid in time, every booking was decided by its charge's outcome.
	for _, id := range onTimeIDs {
		if b := getBooking(t, pool, id); b.Status != "CONFIRMED" && b.CancelReason != "payment_failed" {
			t.Errorf("booking %d paid in time is %+v, want CONFIRMED or CANCELLED payment_failed", id, b)
		}
	}
	mustAudit(t, s)
}
