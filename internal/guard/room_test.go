package guard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/pg/pgtest"
)

func openRoom(t *testing.T, s *apptest.Server, flightID int64, per int) {
	t.Helper()
	v := s.Admin().SetWaitingRoom(t, flightID, true, per)
	if !v.WaitingRoom.Enabled || v.WaitingRoom.AdmitPerSecond != per {
		t.Fatalf("waitingRoom = %+v, want enabled at %d/s", v.WaitingRoom, per)
	}
	if v.ID != flightID {
		t.Errorf("PATCH answered flight %d, want %d", v.ID, flightID)
	}
}

// queued returns the ticket and position of a 429 waiting_room answer,
// failing t for any other.
func queued(t *testing.T, a apptest.Attempt) (string, int) {
	t.Helper()
	if !a.Problem.Is(http.StatusTooManyRequests, "waiting_room") {
		t.Fatalf("want 429 waiting_room, got %s", a)
	}
	retryAfter(t, a.Problem.RetryAfter)
	if a.Problem.Ticket == "" || a.Problem.Position == nil {
		t.Fatalf("waiting_room answer without ticket and position: %+v", *a.Problem)
	}
	return a.Problem.Ticket, *a.Problem.Position
}

func poll(t *testing.T, s *apptest.Server, customer int64, ticket string) apptest.RoomStatus {
	t.Helper()
	st := s.Customer(customer).WaitingRoom(t, ticket)
	if st.Admitted != (st.Token != "") {
		t.Fatalf("GET /waiting-room: %+v", st)
	}
	return st
}

// Callers queue at two berth servers sharing the database and Redis: the
// tickets are numbered by one counter, and admission follows the numbers,
// admitPerSecond per second of the (fake) clock, whichever server is asked.
func TestWaitingRoomFirstComeFirstServedAcrossServers(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	redisURL, prefix := apptest.SharedRedis(t)
	a := start(t, dbURL, redisURL, prefix, nil)
	b := start(t, dbURL, redisURL, prefix, nil)
	servers := []*apptest.Server{a, b}
	flightID := a.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 19, "ABCDEF")})
	openRoom(t, a, flightID, 2)

	// The other server enforces the room within a second (its view of the
	// settings is reloaded in the background, and never used when older).
	first := apptest.Try(a.Customer(1).TryHoldSeats(t, flightID, "ECONOMY", "10A"))
	ticket1, pos := queued(t, first)
	if pos != 1 {
		t.Fatalf("first caller's position = %d, want 1", pos)
	}
	apptest.Eventually(t, 20*time.Second, "server b does not enforce the waiting room after it was opened",
		func() bool { return !poll(t, b, 1, ticket1).Admitted })

	const callers = 8
	tickets := map[int64]string{1: ticket1}
	for c := int64(2); c <= callers; c++ {
		tk, pos := queued(t, apptest.Try(servers[c%2].Customer(c).TryHoldSeats(t, flightID, "ECONOMY", path("1%dB", c))))
		if pos != int(c) {
			t.Errorf("caller %d queued at position %d, want %d", c, pos, c)
		}
		tickets[c] = tk
	}
	// Asking again, at the other server, keeps one's place.
	again, pos := queued(t, apptest.Try(b.Customer(1).TryHoldSeats(t, flightID, "ECONOMY", "10A")))
	if again != ticket1 || pos != 1 {
		t.Errorf("caller 1 asking again got position %d (ticket %s), want 1 with the same ticket %s", pos, again, ticket1)
	}

	// Advance both clocks; after each step the admitted callers are exactly
	// the first ones, and the others' positions count down.
	admittedAfter := map[time.Duration]int64{0: 0, time.Second: 2, 1500 * time.Millisecond: 3, 3 * time.Second: 6, 4 * time.Second: 8}
	tokens := map[int64]string{}
	var elapsed time.Duration
	for _, step := range []time.Duration{0, time.Second, 1500 * time.Millisecond, 3 * time.Second, 4 * time.Second} {
		for _, s := range servers {
			s.Clock.Set(apptest.Epoch.Add(step))
		}
		elapsed = step
		front := admittedAfter[step]
		for c := int64(1); c <= callers; c++ {
			st := poll(t, servers[(c+int64(step/time.Millisecond))%2], c, tickets[c])
			switch {
			case c <= front && !st.Admitted:
				t.Errorf("after %s: caller %d not admitted (position %d), want admitted: the first %d are", step, c, st.Position, front)
			case c > front && st.Admitted:
				t.Errorf("after %s: caller %d admitted ahead of its turn (only the first %d are)", step, c, front)
			case c > front && st.Position != int(c-front):
				t.Errorf("after %s: caller %d at position %d, want %d", step, c, st.Position, c-front)
			}
			if st.Admitted {
				tokens[c] = st.Token
				if exp := st.ExpiresAt; !exp.After(apptest.Epoch.Add(elapsed)) || exp.After(apptest.Epoch.Add(elapsed+2*time.Minute)) {
					t.Errorf("token of caller %d expires at %s, want within 2 minutes", c, exp)
				}
			}
		}
	}
	// Each admitted caller holds with their token, at either server.
	for c := int64(1); c <= callers; c++ {
		seat := path("1%dB", c)
		if c == 1 {
			seat = "10A"
		}
		if r := apptest.Try(servers[(c+1)%2].Customer(c).WithRoomToken(tokens[c]).TryHoldSeats(t, flightID, "ECONOMY", seat)); r.Problem != nil {
			t.Errorf("caller %d holding with its admission: %s", c, r)
		}
	}
	// A second hold queues again, at the back.
	if tk, pos := queued(t, apptest.Try(a.Customer(1).TryHoldSeats(t, flightID, "ECONOMY", "19F"))); tk == ticket1 || pos != 1 {
		t.Errorf("caller 1's second hold queued at position %d (same ticket: %v), want 1 behind the 8 admitted", pos, tk == ticket1)
	}
	mustAudit(t, a)
}

// An admission token works only for its customer and flight, once, before
// it expires; a hold the database refuses does not use it up.
func TestWaitingRoomTokenBoundToCustomerAndFlightSpentOnce(t *testing.T) {
	t.Parallel()
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, "", redisURL, prefix, nil)
	f1 := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 2})
	f2 := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 2})
	openRoom(t, s, f1, 100)
	openRoom(t, s, f2, 100)

	admit := func(customer, flightID int64) string {
		t.Helper()
		ticket, _ := queued(t, apptest.Try(s.Customer(customer).TryHoldQuantity(t, flightID, "ECONOMY", 1)))
		s.Clock.Advance(time.Second)
		st := poll(t, s, customer, ticket)
		if !st.Admitted {
			t.Fatalf("customer %d not admitted a second later: position %d", customer, st.Position)
		}
		return st.Token
	}
	tok := admit(1, f1)

	// Someone else's token, another flight's, a forged one: queued.
	for name, r := range map[string]apptest.Attempt{
		"another customer": apptest.Try(s.Customer(2).WithRoomToken(tok).TryHoldQuantity(t, f1, "ECONOMY", 1)),
		"another flight":   apptest.Try(s.Customer(1).WithRoomToken(tok).TryHoldQuantity(t, f2, "ECONOMY", 1)),
		"forged":           apptest.Try(s.Customer(1).WithRoomToken(strings.Replace(tok, ".1.", ".2.", 1)).TryHoldQuantity(t, f1, "ECONOMY", 1)),
		"tampered":         apptest.Try(s.Customer(1).WithRoomToken(tok[:len(tok)-2]+"xx").TryHoldQuantity(t, f1, "ECONOMY", 1)),
	} {
		if !r.Problem.Is(http.StatusTooManyRequests, "waiting_room") {
			t.Errorf("%s's token: %s, want 429 waiting_room", name, r)
		}
	}

	// The database refuses 3 of 2 seats: the token is not used up.
	if r := apptest.Try(s.Customer(1).WithRoomToken(tok).TryHoldQuantity(t, f1, "ECONOMY", 3)); !r.Problem.Is(http.StatusConflict, "sold_out") {
		t.Fatalf("3 of 2 seats with a token: %s, want 409 sold_out", r)
	}
	s.Customer(1).WithRoomToken(tok).HoldQuantity(t, f1, "ECONOMY", 1)
	// Spent: the same token again, even for a hold that would fit, queues.
	ticket, _ := queued(t, apptest.Try(s.Customer(1).WithRoomToken(tok).TryHoldQuantity(t, f1, "ECONOMY", 1)))
	if old, _ := queued(t, apptest.Try(s.Customer(1).TryHoldQuantity(t, f1, "ECONOMY", 1))); old != ticket || strings.HasPrefix(ticket, path("t%d.1.1.", f1)) {
		t.Errorf("after spending ticket 1 the customer queues with %s, then %s; want one new ticket", ticket, old)
	}
	s.Clock.Advance(time.Second)
	tok2 := poll(t, s, 1, ticket).Token
	if tok2 == "" {
		t.Fatal("new ticket not admitted a second later")
	}
	s.Customer(1).WithRoomToken(tok2).HoldQuantity(t, f1, "ECONOMY", 1)

	// A token past its two minutes is refused.
	late := admit(3, f2)
	s.Clock.Advance(2*time.Minute + time.Second)
	if r := apptest.Try(s.Customer(3).WithRoomToken(late).TryHoldQuantity(t, f2, "ECONOMY", 1)); !r.Problem.Is(http.StatusTooManyRequests, "waiting_room") {
		t.Errorf("expired token: %s, want 429 waiting_room", r)
	}

	// Concurrent uses of one token: one hold at most.
	tok4 := admit(4, f2)
	rs := apptest.Race(10, func(int) apptest.Attempt {
		return apptest.Try(s.Customer(4).WithRoomToken(tok4).TryHoldQuantity(t, f2, "ECONOMY", 1))
	})
	if got := apptest.Tally(rs); got["ok"] != 1 || got["429 waiting_room"] != 9 {
		t.Errorf("one token used 10 times at once: %v, want one held and nine 429 waiting_room", got)
	}

	// Switched off, holds need no token.
	if v := s.Admin().SetWaitingRoom(t, f2, false, 0); v.WaitingRoom.Enabled {
		t.Fatalf("switch the room off: %+v", v.WaitingRoom)
	}
	s.Customer(5).HoldQuantity(t, f2, "ECONOMY", 1)
	mustAudit(t, s)
}

// Bad requests to the waiting room's routes answer the contract's errors
// and change nothing.
func TestWaitingRoomBadRequests(t *testing.T) {
	t.Parallel()
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, "", redisURL, prefix, nil)
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 5})
	admin := s.Token("admin", 1)
	// Raw bodies: what is refused here is what the typed client cannot
	// send (missing, unknown and mistyped fields).
	patch := func(tok string, id int64, body any) *apptest.Response {
		return s.Do(apptest.Request{Method: http.MethodPatch, Path: path("/admin/flights/%d", id), Token: tok, Body: body})
	}
	room := func(m map[string]any) map[string]any { return map[string]any{"waitingRoom": m} }
	for _, tt := range []struct {
		name   string
		tok    string
		id     int64
		body   any
		status int
		code   string
	}{
		{"no token", "", flightID, room(map[string]any{"enabled": true, "admitPerSecond": 5}), 401, "unauthenticated"},
		{"customer", s.Token("customer", 2), flightID, room(map[string]any{"enabled": true, "admitPerSecond": 5}), 403, "forbidden"},
		{"unknown flight", admin, 999999, room(map[string]any{"enabled": true, "admitPerSecond": 5}), 404, "not_found"},
		{"rate zero", admin, flightID, room(map[string]any{"enabled": true, "admitPerSecond": 0}), 422, "validation_failed"},
		{"rate too high", admin, flightID, room(map[string]any{"enabled": true, "admitPerSecond": 100_001}), 422, "validation_failed"},
		{"no rate ever set", admin, flightID, room(map[string]any{"enabled": true}), 422, "validation_failed"},
		{"no enabled", admin, flightID, room(map[string]any{"admitPerSecond": 5}), 422, "validation_failed"},
		{"no waitingRoom", admin, flightID, map[string]any{}, 422, "validation_failed"},
		{"unknown field", admin, flightID, room(map[string]any{"enabled": true, "admitPerSecond": 5, "burst": 9}), 400, "invalid_request"},
		{"wrong type", admin, flightID, room(map[string]any{"enabled": "yes", "admitPerSecond": 5}), 400, "invalid_request"},
	} {
		r := patch(tt.tok, tt.id, tt.body)
		if r.Status != tt.status || r.Code() != tt.code {
			t.Errorf("%s: %d %s, want %d %s", tt.name, r.Status, r.Body, tt.status, tt.code)
		}
	}
	var rows int
	if err := s.App.Pool.QueryRow(context.Background(), `SELECT count(*) FROM waiting_room`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d waiting rooms stored after bad requests, want none", rows)
	}
	// With no room, holds go through.
	s.Customer(2).HoldQuantity(t, flightID, "ECONOMY", 1)

	openRoom(t, s, flightID, 5)
	ticket, _ := queued(t, apptest.Try(s.Customer(3).TryHoldQuantity(t, flightID, "ECONOMY", 1)))
	for name, req := range map[string]apptest.Request{
		"garbage":            {Path: "/waiting-room/nonsense", Token: s.Token("customer", 3)},
		"someone else's":     {Path: "/waiting-room/" + ticket, Token: s.Token("customer", 4)},
		"a token for ticket": {Path: "/waiting-room/a" + ticket[1:], Token: s.Token("customer", 3)},
	} {
		req.Method = http.MethodGet
		if r := s.Do(req); r.Status != http.StatusNotFound || r.Code() != "not_found" {
			t.Errorf("%s ticket: %d %s, want 404 not_found", name, r.Status, r.Body)
		}
	}
	if r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/waiting-room/" + ticket}); r.Status != http.StatusUnauthorized {
		t.Errorf("poll without a token: %d, want 401", r.Status)
	}
	s.Clock.Advance(2 * time.Hour)
	if r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/waiting-room/" + ticket, Token: s.Token("customer", 3)}); r.Status != http.StatusNotFound {
		t.Errorf("poll an expired ticket: %d %s, want 404", r.Status, r.Body)
	}
}

// With BERTH_PROTECT off the room can be set up but is not enforced: the
// bare design, for comparison.
func TestWaitingRoomNotEnforcedWithoutProtect(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) { c.Protect = false }})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 5})
	openRoom(t, s, flightID, 1)
	s.Customer(1).HoldQuantity(t, flightID, "ECONOMY", 1)
}

// A queued customer who keeps asking is answered from this process's
// memory of the ticket for a second (its position moving on at the room's
// rate), not by another round trip to Redis; after that Redis is asked
// again.
func TestWaitingRoomRepeatsAnsweredFromMemoryForASecond(t *testing.T) {
	t.Parallel()
	redisURL, prefix := apptest.SharedRedis(t)
	s := start(t, "", redisURL, prefix, nil)
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 10})
	openRoom(t, s, flightID, 2)
	ticket, pos := queued(t, apptest.Try(s.Customer(1).TryHoldQuantity(t, flightID, "ECONOMY", 1)))
	if pos != 1 {
		t.Fatalf("position %d, want 1", pos)
	}
	// Redis loses the room (as after a failover without persistence): the
	// answers within the second do not notice.
	rdb := redisClient(t, redisURL)
	if err := rdb.Del(context.Background(), path("%swr:{%d}", prefix, flightID), path("%swr:{%d}:c:1", prefix, flightID)).Err(); err != nil {
		t.Fatal(err)
	}
	s.Clock.Advance(500 * time.Millisecond)
	again, pos := queued(t, apptest.Try(s.Customer(1).TryHoldQuantity(t, flightID, "ECONOMY", 1)))
	if again != ticket || pos != 0 {
		t.Errorf("asked again half a second later: position %d, same ticket %v; want 0 with the same ticket", pos, again == ticket)
	}
	s.Clock.Advance(time.Second)
	if fresh, _ := queued(t, apptest.Try(s.Customer(1).TryHoldQuantity(t, flightID, "ECONOMY", 1))); fresh == ticket {
		t.Error("a second later the ticket still came from memory; want Redis asked (a new ticket, since Redis lost the old one)")
	}
}
