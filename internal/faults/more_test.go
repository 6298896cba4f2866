//go:build faults

package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/app/apptest"
)

// exhaustion: something else takes every connection PostgreSQL has for
// 5 s. The test opens connections until the server refuses more, then,
// again and again, closes berth's own (as a server or a pooler recycling
// them would) and takes the freed slots too; then it lets them all go. berth must answer 503
// overloaded with Retry-After (never 500, never a hang past its
// timeouts), and every answered key must replay its answer.
func exhaustion(c *client) scenario {
	var taken, berthLeft atomic.Int64
	return scenario{name: "exhaustion", inject: func(t *testing.T, e *env) time.Time {
		ctx := context.Background()
		var held []*pgx.Conn
		grab := func(until time.Time) {
			for time.Now().Before(until) {
				conn, err := pgx.Connect(ctx, e.dbURL)
				if err != nil {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				held = append(held, conn)
			}
		}
		grab(time.Now().Add(500 * time.Millisecond))
		if len(held) == 0 {
			t.Error("the test could take no connection")
			return time.Now()
		}
		// berth's pools reconnect as soon as a slot frees: close their
		// connections again and again and take the freed slots, for 5 s.
		minBerth := int64(-1)
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
			if _, err := held[0].Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE application_name = 'berth' AND pid <> pg_backend_pid()`); err != nil {
				t.Errorf("close berth's connections: %v", err)
			}
			grab(time.Now().Add(250 * time.Millisecond))
			var n int64
			if err := held[0].QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'berth'`).Scan(&n); err == nil &&
				(minBerth < 0 || n < minBerth) {
				minBerth = n
			}
		}
		taken.Store(int64(len(held)))
		berthLeft.Store(minBerth)
		for _, conn := range held {
			_ = conn.Close(ctx)
		}
		return time.Now()
	}, check: func(t *testing.T, e *env, ops []*op) {
		replay(t, c, ops)
	}, notes: func() []string {
		return []string{fmt.Sprintf("connections taken by the test %d; the fewest berth had after they were closed under it %d", taken.Load(), berthLeft.Load())}
	}}
}

// replay sends every op's key once more: the answer must be the one the
// op was decided with (the same booking, or seat_unavailable again).
func replay(t *testing.T, c *client, ops []*op) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, o := range ops {
		first := o.final()
		if !decided(first) {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			a := c.send(context.Background(), &op{key: o.key, customer: o.customer, seat: o.seat}, 0)
			if a.status != first.status || a.code != first.code || a.bookingID != first.bookingID {
				t.Errorf("key %s replayed as %d %s booking %d, first answered %d %s booking %d",
					o.key, a.status, a.code, a.bookingID, first.status, first.code, first.bookingID)
			}
		})
	}
	wg.Wait()
}

// payOp is one customer's hold, payment start and, for every other one,
// cancellation once the payment confirmed it.
type payOp struct {
	phase     string
	booking   int64
	hold      int
	pay       attempt
	payTime   time.Duration
	confirmed bool
	cancel    int
	refund    int64
}

// gatewayFaults: after 3 s of a working gateway, the gateway behind the
// fault proxy answers each call 4.5 s late for 6 s (within berth's 5 s per
// attempt, so its breaker stays closed), then refuses connections for 4 s,
// then takes them and never answers for 4 s, while customers hold, pay and
// cancel paid bookings (refunds). Payment starts must answer 201 or fail
// fast through the breaker (503 overloaded), none waiting past the gateway
// client's budget; the events (tickets, notifications, check-in, refunds
// recorded) must all be published while the gateway still hangs; once it
// is back every refund must complete; and every charge the gateway took
// must be, in berth's database, confirmed or refunded, once.
func gatewayFaults(c *client) scenario {
	var (
		mu     sync.Mutex
		pays   []*payOp
		maxAge = map[string]float64{}
		// parkedRefunds are the refunds not completed when the gateway
		// comes back.
		parkedRefunds int
		drained       bool
		// refundsDone: every refund completed after the gateway came back.
		refundsDone bool
		gwStats     string
	)
	return scenario{name: "gateway", inject: func(t *testing.T, e *env) time.Time {
		admin := apptest.Token(t, "admin", 1, time.Now())
		seats := apptest.Seats(1, 40, "ABCDEF")
		flight := apptest.CreateFlight(t, e.url(0), admin, time.Now().Add(72*time.Hour),
			apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: seats})
		var phase atomic.Value
		phase.Store("pass")
		stopAge := make(chan struct{})
		ageDone := make(chan struct{})
		go func() {
			defer close(ageDone)
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stopAge:
					return
				case <-tick.C:
				}
				var age float64
				if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(extract(epoch FROM max(now() - created_at)), 0)::float8
					FROM outbox WHERE published_at IS NULL`).Scan(&age); err == nil {
					p := phase.Load().(string)
					mu.Lock()
					maxAge[p] = max(maxAge[p], age)
					mu.Unlock()
				}
			}
		}()
		hc := &http.Client{Timeout: time.Minute}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		// The driver ends before wg.Wait: a wg.Go of a tick it took as
		// stop closed must not race with the Wait.
		driverDone := make(chan struct{})
		go func() {
			defer close(driverDone)
			tick := time.NewTicker(125 * time.Millisecond)
			defer tick.Stop()
			for n := 0; n < len(seats); n++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				p := &payOp{phase: phase.Load().(string)}
				mu.Lock()
				pays = append(pays, p)
				mu.Unlock()
				wg.Go(func() {
					payFlow(c, hc, e.url(n%2), flight, seats[n], int64(10_000+n), fmt.Sprintf("pay-%d-%d", flight, n), n%2 == 0, p)
				})
			}
		}()
		// Paid bookings first, whose cancellations fall into the fault.
		time.Sleep(3 * time.Second)
		// Slow but answering: the breaker stays closed, and every call
		// to the gateway takes 4.5 s.
		phase.Store("lag")
		e.gw.set(lag, 4500*time.Millisecond)
		time.Sleep(6 * time.Second)
		phase.Store("refuse")
		e.gw.set(refuse, 0)
		time.Sleep(4 * time.Second)
		phase.Store("hang")
		e.gw.set(hang, 0)
		time.Sleep(4 * time.Second)
		close(stop)
		<-driverDone
		wg.Wait()
		// Still hanging: every event must leave the outbox all the same.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			var left int
			if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&left); err == nil && left == 0 {
				drained = true
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !drained {
			t.Error("events stayed in the outbox while the gateway hung: a gateway that does not answer holds up the events")
		}
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM refund WHERE status = 'REQUESTED'`).Scan(&parkedRefunds); err != nil {
			t.Error(err)
		}
		phase.Store("after")
		e.gw.set(pass, 0)
		close(stopAge)
		<-ageDone
		return time.Now()
	}, check: func(t *testing.T, e *env, _ []*op) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range pays {
			switch a := p.pay; {
			case p.hold == http.StatusServiceUnavailable:
				// Shed under load: no payment to start.
			case p.hold != http.StatusCreated:
				t.Errorf("a hold for the payment driver answered %d", p.hold)
			case a.status == http.StatusCreated, a.status == http.StatusConflict:
			case a.status == http.StatusServiceUnavailable && a.code == "overloaded" && a.retryAfter:
			default:
				t.Errorf("payment start of booking %d (%s): %d %s %s, want 201 or 503 overloaded with Retry-After", p.booking, p.phase, a.status, a.code, a.err)
			}
			// The gateway client's budget: 3 attempts of at most 5 s and
			// their backoff; nothing may wait past it.
			if p.payTime > 17*time.Second {
				t.Errorf("payment start of booking %d (%s) took %s, past the gateway client's budget", p.booking, p.phase, p.payTime)
			}
			if p.cancel != 0 && p.cancel != http.StatusOK {
				t.Errorf("cancelling paid booking %d answered %d", p.booking, p.cancel)
			}
		}
		// Every refund completes once the gateway is back.
		deadline := time.Now().Add(60 * time.Second)
		var left int
		for {
			if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM refund WHERE status <> 'SUCCEEDED'`).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if left != 0 {
			t.Errorf("%d refunds not completed 60 s after the gateway came back", left)
		}
		refundsDone = left == 0
		gwStats = money(t, e)
	}, notes: func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, ph := range []string{"pass", "lag", "refuse", "hang"} {
			counts := map[string]int{}
			var lat []time.Duration
			for _, p := range pays {
				if p.phase != ph || p.hold != http.StatusCreated {
					continue
				}
				label := fmt.Sprint(p.pay.status)
				if p.pay.code != "" {
					label += " " + p.pay.code
				}
				counts[label]++
				lat = append(lat, p.payTime)
			}
			slices.Sort(lat)
			var p99, worst time.Duration
			if len(lat) > 0 {
				p99, worst = lat[len(lat)*99/100], lat[len(lat)-1]
			}
			out = append(out, fmt.Sprintf("gateway %-6s payment starts %v p99 %s max %s; oldest unpublished event %.1fs",
				ph, counts, p99.Round(time.Millisecond), worst.Round(time.Millisecond), maxAge[ph]))
		}
		cancels, refunds := 0, 0
		for _, p := range pays {
			if p.cancel == http.StatusOK {
				cancels++
			}
			if p.refund > 0 {
				refunds++
			}
		}
		out = append(out, fmt.Sprintf("paid bookings cancelled %d (%d with a refund); refunds not completed when the gateway came back %d, all completed after it: %v; outbox drained while the gateway hung: %v",
			cancels, refunds, parkedRefunds, refundsDone, drained), "gateway's record: "+gwStats)
		return out
	}}
}

// payFlow holds seat for customer, starts its payment under key and,
// when cancel, waits for the payment to confirm the booking and cancels
// it, which refunds it.
func payFlow(c *client, hc *http.Client, base string, flight int64, seat string, customer int64, key string, cancel bool, p *payOp) {
	tok := c.token(customer)
	// The fields of the answers this flow reads: a booking's, or a
	// problem's code. Raw transport: under faults a request may fail, which
	// the typed client would take for the test's failure.
	type answer struct {
		BookingID    int64  `json:"bookingId"`
		Status       string `json:"status"`
		RefundAmount int64  `json:"refundAmount"`
		Code         string `json:"code"`
	}
	do := func(method, path, key string, body any) (int, answer, http.Header, error) {
		var doc answer
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, doc, nil, err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &doc)
		return resp.StatusCode, doc, resp.Header, nil
	}
	status, doc, _, _ := do(http.MethodPost, "/bookings", "", apptest.SeatHold{FlightID: flight, FareClass: "ECONOMY", Seats: []string{seat}})
	p.hold = status
	if status != http.StatusCreated {
		return
	}
	p.booking = doc.BookingID
	start := time.Now()
	status, doc, h, err := do(http.MethodPost, fmt.Sprintf("/bookings/%d/payments", p.booking), key, struct{}{})
	p.payTime = time.Since(start)
	p.pay = attempt{status: status, retryAfter: h.Get("Retry-After") != ""}
	if err != nil {
		p.pay.err = err.Error()
	}
	p.pay.code = doc.Code
	if status != http.StatusCreated || !cancel {
		return
	}
	for range 60 {
		time.Sleep(250 * time.Millisecond)
		if s, doc, _, _ := do(http.MethodGet, fmt.Sprintf("/bookings/%d", p.booking), "", nil); s == http.StatusOK && doc.Status == "CONFIRMED" {
			p.confirmed = true
			break
		}
	}
	if !p.confirmed {
		return // the charge failed, or is still on its way
	}
	time.Sleep(2 * time.Second) // into the next phase of the fault
	status, doc, _, _ = do(http.MethodPost, fmt.Sprintf("/bookings/%d/cancel", p.booking), "", nil)
	p.cancel = status
	p.refund = doc.RefundAmount
}

var statsLine = regexp.MustCompile(`(\d+) charges \((\d+) succeeded, (\d+) failed, (\d+) pending\),\s*(\d+) refunds`)

// money holds berth's record of the money against the gateway's: every
// charge the gateway took is one payment in berth, confirmed (its booking
// confirmed and not refunded, or cancelled and refunded in full) or
// refunded (not berth's charge); every refund berth asked for succeeded at
// the gateway, once. It returns the gateway's own counts.
func money(t *testing.T, e *env) string {
	ctx := context.Background()
	var bad []string
	rows, err := e.pool.Query(ctx, `SELECT p.provider_txn_id, p.outcome, b.status, p.amount,
			count(r.id), count(r.id) FILTER (WHERE r.status = 'SUCCEEDED'), coalesce(sum(r.amount), 0)
		FROM payment p JOIN booking b ON b.id = p.booking_id LEFT JOIN refund r ON r.payment_id = p.id
		GROUP BY p.id, b.status`)
	if err != nil {
		t.Fatal(err)
	}
	var payments int
	for rows.Next() {
		var (
			txn, outcome, status   string
			amount, refunded       int64
			nRefunds, nRefundsDone int
		)
		if err := rows.Scan(&txn, &outcome, &status, &amount, &nRefunds, &nRefundsDone, &refunded); err != nil {
			t.Fatal(err)
		}
		payments++
		switch {
		case nRefunds > 1:
			bad = append(bad, fmt.Sprintf("charge %s refunded %d times", txn, nRefunds))
		case nRefunds != nRefundsDone:
			bad = append(bad, fmt.Sprintf("charge %s: a refund not completed", txn))
		case outcome == "confirmed" && status == "CONFIRMED" && nRefunds == 0:
		case outcome == "confirmed" && status == "CANCELLED" && refunded == amount:
		case outcome == "refund" && refunded == amount:
		default:
			bad = append(bad, fmt.Sprintf("charge %s (%s, %d) of a %s booking: %d refunds of %d in all", txn, outcome, amount, status, nRefunds, refunded))
		}
	}
	rows.Close()
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	for i, b := range bad {
		if i == 10 {
			t.Errorf("… and %d more", len(bad)-10)
			break
		}
		t.Error(b)
	}
	var refunds int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM refund WHERE status = 'SUCCEEDED'`).Scan(&refunds); err != nil {
		t.Fatal(err)
	}
	// The gateway's own record: its index page's counts.
	var m []string
	for range 20 { // its pending charges settle within a second
		resp, err := http.Get(e.paysim + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if m = statsLine.FindStringSubmatch(string(b)); m == nil {
			t.Fatalf("the gateway's index has no counts:\n%s", b)
		}
		if m[4] == "0" {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	succeeded, _ := strconv.Atoi(m[2])
	gwRefunds, _ := strconv.Atoi(m[5])
	if succeeded != payments {
		t.Errorf("the gateway took %d charges, berth recorded %d payments", succeeded, payments)
	}
	if gwRefunds != refunds {
		t.Errorf("the gateway made %d refunds, berth recorded %d completed", gwRefunds, refunds)
	}
	return fmt.Sprintf("charges %s (succeeded %s, failed %s, pending %s), refunds %s; berth: %d payments, %d refunds completed",
		m[1], m[2], m[3], m[4], m[5], payments, refunds)
}
