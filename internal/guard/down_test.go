package guard_test

import (
	"net"
	"net/http"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
)

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// Redis unreachable: berth starts, stays ready (200) and says on /readyz that
// it serves degraded, so that a load balancer keeps it; the gate and the
// hints step aside (the database still sells each seat once), the request
// limits fall back to this process, the hold limit (the database's) holds
// exactly, the waiting room admits its rate per process; no 500s.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	s := start(t, "", "redis://"+closedPort(t)+"/0", "", func(c *config.Config) {
		c.HoldLimit = config.Rate{N: 3, Window: 15 * time.Minute}
		c.RequestLimit = config.Rate{N: 1000, Window: time.Minute}
	})
	r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/readyz"})
	var ready map[string]string
	r.JSON(t, &ready)
	if r.Status != http.StatusOK || ready["redis"] != "degraded" || ready["database"] != "ok" {
		t.Errorf("readyz: %d %s, want 200 with redis degraded", r.Status, r.Body)
	}
	if up := metric(t, s.App.Registry, "berth_guard_redis_up", nil); up != 0 {
		t.Errorf("berth_guard_redis_up = %v, want 0", up)
	}
	flightID := s.CreateFlight(t,
		apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 12, "ABC")},
		apptest.Fare{Class: "BUSINESS", Price: 5000, Capacity: 1})

	rs := apptest.Race(20, func(i int) apptest.Attempt {
		return apptest.Try(s.Customer(int64(100+i)).TryHoldSeats(t, flightID, "ECONOMY", "10A"))
	})
	if got := apptest.Tally(rs); got["ok"] != 1 || got["409 seat_unavailable"] != 19 {
		t.Errorf("20 buyers of one seat without Redis: %v, want one 201 and 19 409", got)
	}
	if n := dbHolds(t, s); n != 20 {
		t.Errorf("%d holds reached the database, want all 20: the gate steps aside", n)
	}
	s.Customer(1).HoldQuantity(t, flightID, "BUSINESS", 1)
	for range 3 {
		if r := apptest.Try(s.Customer(2).TryHoldQuantity(t, flightID, "BUSINESS", 1)); r.Code() != "sold_out" {
			t.Fatalf("full class without Redis: %s", r)
		}
	}

	// The hold limit, which never needed Redis.
	for _, seat := range []string{"11A", "11B", "11C"} {
		s.Customer(7).HoldSeats(t, flightID, "ECONOMY", seat)
	}
	fourth := apptest.Try(s.Customer(7).TryHoldSeats(t, flightID, "ECONOMY", "12A"))
	if !fourth.Problem.Is(http.StatusTooManyRequests, "rate_limited") {
		t.Fatalf("fourth hold without Redis: %s, want 429 rate_limited", fourth)
	}
	retryAfter(t, fourth.Problem.RetryAfter)

	// The waiting room admits its rate from this process, and asks the rest
	// to come back (it cannot queue them fairly without Redis).
	openRoom(t, s, flightID, 2)
	var room []apptest.Attempt
	for i := range 6 {
		a := apptest.Try(s.Customer(int64(200+i)).TryHoldQuantity(t, flightID, "ECONOMY", 1))
		if a.Problem != nil {
			retryAfter(t, a.Problem.RetryAfter)
		}
		room = append(room, a)
	}
	if got := apptest.Tally(room); got["ok"] != 2 || got["503 overloaded"] != 4 {
		t.Errorf("waiting room without Redis at 2/s: %v, want two held and four 503 overloaded", got)
	}
	for _, layer := range []string{"seat_gate", "request_limit", "waiting_room"} {
		if metric(t, s.App.Registry, "berth_guard_fallback_total", map[string]string{"layer": layer}) == 0 {
			t.Errorf("no fallback counted for %s", layer)
		}
	}
	if metric(t, s.App.Registry, "berth_guard_redis_errors_total", nil) == 0 {
		t.Error("no Redis error counted")
	}
	mustAudit(t, s)
}
