package guard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/guard"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/pg/pgtest"
)

// handlersIn counts the goroutines running fn of the API right now.
func handlersIn(fn string) int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return bytes.Count(buf, []byte("httpapi.(*Server)."+fn+"("))
}

// settledHandlers counts the goroutines in Server.fn until at most want are
// left or d has passed, and returns the last count.
func settledHandlers(fn string, want int, d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		h := handlersIn(fn)
		if h <= want || time.Now().After(deadline) {
			return h
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// await collects n answers from rs, failing t if they do not come while
// the database is stalled (they would only come after it, or after the
// requests' own deadline, if requests queued for connections).
func await[T any](t *testing.T, rs <-chan T, n int) []T {
	t.Helper()
	var out []T
	timeout := time.After(60 * time.Second)
	for len(out) < n {
		select {
		case r := <-rs:
			out = append(out, r)
		case <-timeout:
			t.Fatalf("only %d of %d answers while the database is stalled", len(out), n)
		}
	}
	return out
}

// awaitQuiet collects answers from rs until n came or none came for quiet.
func awaitQuiet[T any](t *testing.T, rs <-chan T, n int, quiet time.Duration) []T {
	t.Helper()
	var out []T
	for len(out) < n {
		select {
		case r := <-rs:
			out = append(out, r)
		case <-time.After(quiet):
			return out
		}
	}
	return out
}

// A database that stalls (a lock held elsewhere) with a pool of two: the
// requests that find no connection within the shed wait answer 503
// overloaded with Retry-After at once, never 500, and only the requests
// holding a connection stay in the process. Searches cannot take the
// connections that holds need.
func TestShedsLoadWhenTheDatabaseStalls(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, dbURL, redisURL, prefix, func(c *config.Config) {
		c.DBMaxConns = 2
		c.ShedWait = 100 * time.Millisecond
		// The event relay and consumers would use the two connections
		// too, at moments of their own; this test counts them for requests.
		c.Events.InServe = false
	})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 500})
	ctx := context.Background()
	// Both connections open before the stall: making one would count
	// against the shed wait.
	var warm []*pgxpool.Conn
	for range 2 {
		c, err := s.App.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		warm = append(warm, c)
	}
	for _, c := range warm {
		c.Release()
	}
	locker, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)

	// Holds stall on the fare counter's rows.
	lock, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `SELECT 1 FROM fare_bucket WHERE flight_id = $1 FOR UPDATE`, flightID); err != nil {
		t.Fatal(err)
	}
	const n = 60
	answers := make(chan apptest.Attempt, n)
	for i := range n {
		go func() { answers <- apptest.Try(s.Customer(int64(1000+i)).TryHoldQuantity(t, flightID, "ECONOMY", 1)) }()
	}
	// The pool has two connections: at most two transactions of holds can
	// be in the database (one hold each, or a coalesced batch of the holds
	// that arrived together), and every other hold is answered 503
	// overloaded while the lock stays, by the hold lane, the connection
	// wait or the coalescing queue's wait. The shed answers come within a
	// few shed waits; collect until the answers stop (well before the
	// holds in the database reach their own deadline).
	inside := guard.LanesFor(2)[guard.LaneHold] // at most this many holds past the lane
	shed := awaitQuiet(t, answers, n, 500*time.Millisecond)
	if len(shed) < n-inside {
		t.Fatalf("%d of %d holds answered while the database is stalled, want at least %d", len(shed), n, n-inside)
	}
	for _, r := range shed {
		if !r.Problem.Is(http.StatusServiceUnavailable, "overloaded") {
			t.Fatalf("answer while stalled: %s, want 503 overloaded", r)
		}
		retryAfter(t, r.Problem.RetryAfter)
	}
	// A handler that has sent its 503 may still be unwinding (logging, the
	// deferred releases) for a moment on a loaded machine; one that waits on
	// the database stays for as long as the lock does.
	if h := settledHandlers("createBooking", inside, 2*time.Second); h > inside {
		t.Errorf("%d hold handlers still running while the database is stalled, want at most the hold lane's %d", h, inside)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range await(t, answers, n-len(shed)) {
		if r.Problem != nil {
			t.Errorf("a hold that was in the database: %s, want held once the lock is gone", r)
		}
	}

	// Searches stall on the airport table; they may use half the pool, so
	// a hold still gets the other connection. One search is asked before
	// the stall, so that its answer is cached.
	cachedPath := path("/flights?from=SGN&to=HAN&date=%s", apptest.Epoch.AddDate(0, 1, 0).Format(time.DateOnly))
	if r := s.Do(apptest.Request{Method: http.MethodGet, Path: cachedPath}); r.Status != http.StatusOK {
		t.Fatalf("search before the stall: %d %s", r.Status, r.Body)
	}
	cachedAt := time.Now()
	lock, err = locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `LOCK TABLE airport IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	shedAcquires := turnedAway(t, s, "shed_acquire")
	const searches = 10
	// Raw requests: any route is shed alike, whatever its answer.
	found := make(chan *apptest.Response, searches)
	for i := range searches {
		go func() {
			found <- s.Do(apptest.Request{Method: http.MethodGet,
				Path: path("/flights?from=SGN&to=HAN&date=%s", apptest.Epoch.AddDate(0, 0, i).Format(time.DateOnly))})
		}()
	}
	for _, r := range await(t, found, searches-1) {
		if r.Status != http.StatusServiceUnavailable || r.Code() != "overloaded" {
			t.Fatalf("search while stalled: %d %s, want 503 overloaded", r.Status, r.Body)
		}
	}
	// A search turned away for want of a slot is counted once, by its
	// lane, not again as an acquire that ran out of time.
	if n := turnedAway(t, s, "shed_acquire"); n != shedAcquires {
		t.Errorf("searches shed by their lane counted %d times as shed acquires", n-shedAcquires)
	}
	// The read lane is full (one search in the database, the rest shed),
	// but a read that needs no connection takes no slot of it: the cached
	// search and the API's own description are answered.
	reads := []string{"/openapi.yaml"}
	if time.Since(cachedAt) < 2*time.Second { // flight searches are cached 3 s
		reads = append(reads, cachedPath)
	} else {
		t.Log("the cached search is not asked again: its answer may have expired on this slow machine")
	}
	for _, p := range reads {
		if r := s.Do(apptest.Request{Method: http.MethodGet, Path: p}); r.Status != http.StatusOK {
			t.Errorf("GET %s while the searches stall: %d %s, want 200 (it needs no connection)", p, r.Status, r.Body)
		}
	}
	s.Customer(1).HoldQuantity(t, flightID, "ECONOMY", 1)
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if r := await(t, found, 1)[0]; r.Status != http.StatusOK {
		t.Errorf("the search that had a connection: %d %s", r.Status, r.Body)
	}
	mustAudit(t, s)
}

// Money first: while a burst of holds keeps every connection they may have
// (stalled on a lock), cancellations and payment starts still get a
// connection of their own and are answered, never shed; the holds that
// found no connection are the ones answered 503.
func TestMoneyIsNeverShedByHolds(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, dbURL, redisURL, prefix, func(c *config.Config) {
		c.DBMaxConns = 4
		c.DBMinConns = 4
		c.ShedWait = 100 * time.Millisecond
		c.Events.InServe = false
	})
	// Holds of one flight share a batch's connection: holds of eight
	// flights want eight.
	var hot []int64
	for range 8 {
		hot = append(hot, s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 500}))
	}
	other := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 500})
	var paid, cancelled []int64
	for i := range 3 {
		paid = append(paid, s.Customer(int64(10+i)).HoldQuantity(t, other, "ECONOMY", 1).BookingID)
		cancelled = append(cancelled, s.Customer(int64(20+i)).HoldQuantity(t, other, "ECONOMY", 1).BookingID)
	}
	ctx := context.Background()
	locker, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	lock, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `SELECT 1 FROM fare_bucket WHERE flight_id = ANY($1) FOR UPDATE`, hot); err != nil {
		t.Fatal(err)
	}
	const n = 40
	holds := make(chan apptest.Attempt, n)
	for i := range n {
		go func() {
			holds <- apptest.Try(s.Customer(int64(1000+i)).TryHoldQuantity(t, hot[i%len(hot)], "ECONOMY", 1))
		}()
	}
	// The holds that reached the database now have every connection of
	// theirs, stalled; the others are being shed.
	shed := awaitQuiet(t, holds, n, 500*time.Millisecond)
	if len(shed) == 0 {
		t.Fatal("no hold was shed: the burst did not fill the holds' connections")
	}
	for i := range 3 {
		if _, p := s.Customer(int64(20+i)).TryCancel(t, cancelled[i]); p != nil {
			t.Errorf("cancellation during the burst: %s, want it cancelled", p)
		}
		if _, p := s.Customer(int64(10+i)).TryStartPayment(t, paid[i], path("pay-%d", i)); p != nil && p.Status >= 500 {
			t.Errorf("payment start during the burst: %s, want an answer, not a 5xx", p)
		}
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, holds, n-len(shed))
	mustAudit(t, s)
}

// Money first in a burst: many holds on one hot flight are released at
// once, more than the hold lane admits, and with them many more payment
// starts than the money lane has slots, and the gateway's webhooks of
// charges already started. Holds may be shed (503); money never is: every
// payment start is answered 201 (or 409 for a hold that is no longer
// payable), never 503, and every webhook 2xx.
func TestMoneyIsAnsweredInAHoldBurst(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, dbURL, redisURL, prefix, func(c *config.Config) {
		c.DBMaxConns = 4
		c.DBMinConns = 4
		c.ShedWait = 100 * time.Millisecond
		c.Events.InServe = false
	})
	hot := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 500})
	other := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 500})
	lanes := guard.LanesFor(4)
	pays, hooks := 4*lanes[guard.LaneMoney], 8 // many more payment starts than the money lane's slots and waiters
	holds := 4 * lanes[guard.LaneHold]
	customer := func(i int) int64 { return int64(10 + i) }
	var toPay []int64
	for i := range pays {
		toPay = append(toPay, s.Customer(customer(i)).HoldQuantity(t, other, "ECONOMY", 1).BookingID)
	}
	// Charges started before the burst, whose webhooks arrive in it.
	key, err := config.WebhookKey(apptest.WebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	var webhooks [][]byte
	for i := range hooks {
		c := pays + i
		id := s.Customer(customer(c)).HoldQuantity(t, other, "ECONOMY", 1).BookingID
		r := startPayment(s, customer(c), id, path("before-%d", i))
		if r.Status != http.StatusCreated {
			t.Fatalf("payment start before the burst: %d %s", r.Status, r.Body)
		}
		var txn string
		if err := s.App.Pool.QueryRow(context.Background(), `SELECT provider_txn_id FROM charge WHERE booking_id = $1`, id).Scan(&txn); err != nil {
			t.Fatal(err)
		}
		body, err := json.Marshal(payment.Webhook{Type: payment.ChargeSucceeded,
			Data: payment.WebhookData{BookingID: id, ProviderTxnID: txn, Amount: 1000, Currency: "VND"}})
		if err != nil {
			t.Fatal(err)
		}
		webhooks = append(webhooks, body)
	}

	// Raw answers: holds, payment starts and webhooks, tallied alike.
	rs := apptest.Race(holds+pays+hooks, func(i int) *apptest.Response {
		switch {
		case i < holds:
			return s.Do(apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: s.Token("customer", int64(1000+i)),
				Body: apptest.QuantityHold{FlightID: hot, FareClass: "ECONOMY", Quantity: 1}})
		case i < holds+pays:
			k := i - holds
			return startPayment(s, customer(k), toPay[k], path("burst-%d", k))
		default:
			k := i - holds - pays
			h := http.Header{}
			payment.SignHeaders(h, key, path("msg-%d", k), s.Clock.Now(), webhooks[k])
			req := apptest.Request{Method: http.MethodPost, Path: "/payments/webhook", Body: webhooks[k], Header: map[string]string{}}
			for name := range h {
				req.Header[name] = h.Get(name)
			}
			return s.Do(req)
		}
	})
	t.Logf("holds %v, payment starts %v, webhooks %v",
		apptest.Answers(rs[:holds]), apptest.Answers(rs[holds:holds+pays]), apptest.Answers(rs[holds+pays:]))
	for _, r := range rs[holds : holds+pays] {
		if r.Status != http.StatusCreated && r.Status != http.StatusConflict {
			t.Errorf("payment start in the burst: %d %s, want 201 (or 409), never 503", r.Status, r.Body)
		}
	}
	for _, r := range rs[holds+pays:] {
		if r.Status/100 != 2 {
			t.Errorf("webhook in the burst: %d %s, want 2xx", r.Status, r.Body)
		}
	}
	mustAudit(t, s)
}

// startPayment starts paying booking id as customer, under key.
func startPayment(s *apptest.Server, customer, id int64, key string) *apptest.Response {
	return s.Do(apptest.Request{Method: http.MethodPost, Path: path("/bookings/%d/payments", id), Token: s.Token("customer", customer),
		Body: map[string]any{}, Header: map[string]string{"Idempotency-Key": key}})
}
