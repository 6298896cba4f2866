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
	r := s.Do(apptest.Request{Method: http.MethodPatch, Path: path("/admin/flights/%d", flightID), Token: s.Token("admin", 1),
		Body: map[string]any{"waitingRoom": map[string]any{"enabled": true, "admitPerSecond": per}}})
	if r.Status != http.StatusOK {
		t.Fatalf("open waiting room: %d %s", r.Status, r.Body)
	}
	wr := r.Map(t)["waitingRoom"].(map[string]any)
	if wr["enabled"] != true || wr["admitPerSecond"] != float64(per) {
		t.Fatalf("waitingRoom = %v, want enabled at %d/s", wr, per)
	}
	if r.Map(t)["id"] != float64(flightID) {
		t.Errorf("PATCH answered flight %v, want %d", r.Map(t)["id"], flightID)
	}
}

// queued returns the ticket and position of a 429 waiting_room answer,
// failing t for any other.
func queued(t *testing.T, r *apptest.Response) (string, int) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests || r.Code() != "waiting_room" {
		t.Fatalf("want 429 waiting_room, got %d %s", r.Status, r.Body)
	}
	retryAfter(t, r)
	m := r.Map(t)
	ticket, _ := m["ticket"].(string)
	pos, ok := m["position"].(float64)
	if ticket == "" || !ok {
		t.Fatalf("waiting_room answer without ticket and position: %s", r.Body)
	}
	return ticket, int(pos)
}

type roomStatus struct {
	Position  int    `json:"position"`
	Admitted  bool   `json:"admitted"`
	Token     string `json:"token"`
	ExpiresAt string `json:"expiresAt"`
}

func poll(t *testing.T, s *apptest.Server, customer int64, ticket string) roomStatus {
	t.Helper()
	r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/waiting-room/" + ticket, Token: s.Token("customer", customer)})
	if r.Status != http.StatusOK {
		t.Fatalf("GET /waiting-room: %d %s", r.Status, r.Body)
	}
	var st roomStatus
	r.JSON(t, &st)
	if st.Admitted != (st.Token != "") {
		t.Fatalf("GET /waiting-room: %s", r.Body)
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
	first := book(a, 1, seatHold(flightID, "ECONOMY", "10A"), "")
	ticket1, pos := queued(t, first)
	if pos != 1 {
		t.Fatalf("first caller's position = %d, want 1", pos)
	}
	deadline := time.Now().Add(20 * time.Second)
	for poll(t, b, 1, ticket1).Admitted {
		if time.Now().After(deadline) {
			t.Fatal("server b still does not enforce the waiting room 20 s after it was opened")
		}
		time.Sleep(50 * time.Millisecond)
	}

	const callers = 8
	tickets := map[int64]string{1: ticket1}
	for c := int64(2); c <= callers; c++ {
		tk, pos := queued(t, book(servers[c%2], c, seatHold(flightID, "ECONOMY", path("1%dB", c)), ""))
		if pos != int(c) {
			t.Errorf("caller %d queued at position %d, want %d", c, pos, c)
		}
		tickets[c] = tk
	}
	// Asking again, at the other server, keeps one's place.
	again, pos := queued(t, book(b, 1, seatHold(flightID, "ECONOMY", "10A"), ""))
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
				exp, err := time.Parse(time.RFC3339Nano, st.ExpiresAt)
				if err != nil || !exp.After(apptest.Epoch.Add(elapsed)) || exp.After(apptest.Epoch.Add(elapsed+2*time.Minute)) {
					t.Errorf("token of caller %d expires at %q, want within 2 minutes", c, st.ExpiresAt)
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
		if r := book(servers[(c+1)%2], c, seatHold(flightID, "ECONOMY", seat), tokens[c]); r.Status != http.StatusCreated {
			t.Errorf("caller %d holding with its admission: %d %s", c, r.Status, r.Body)
		}
	}
	// A second hold queues again, at the back.
	if tk, pos := queued(t, book(a, 1, seatHold(flightID, "ECONOMY", "19F"), "")); tk == ticket1 || pos != 1 {
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
		ticket, _ := queued(t, book(s, customer, qtyHold(flightID, "ECONOMY", 1), ""))
		s.Clock.Advance(time.Second)
		st := poll(t, s, customer, ticket)
		if !st.Admitted {
			t.Fatalf("customer %d not admitted a second later: position %d", customer, st.Position)
		}
		return st.Token
	}
	tok := admit(1, f1)

	// Someone else's token, another flight's, a forged one: queued.
	for name, r := range map[string]*apptest.Response{
		"another customer": book(s, 2, qtyHold(f1, "ECONOMY", 1), tok),
		"another flight":   book(s, 1, qtyHold(f2, "ECONOMY", 1), tok),
		"forged":           book(s, 1, qtyHold(f1, "ECONOMY", 1), strings.Replace(tok, ".1.", ".2.", 1)),
		"tampered":         book(s, 1, qtyHold(f1, "ECONOMY", 1), tok[:len(tok)-2]+"xx"),
	} {
		if r.Status != http.StatusTooManyRequests || r.Code() != "waiting_room" {
			t.Errorf("%s's token: %d %s, want 429 waiting_room", name, r.Status, r.Body)
		}
	}

	// The database refuses 3 of 2 seats: the token is not used up.
	if r := book(s, 1, qtyHold(f1, "ECONOMY", 3), tok); r.Status != http.StatusConflict || r.Code() != "sold_out" {
		t.Fatalf("3 of 2 seats with a token: %d %s, want 409 sold_out", r.Status, r.Body)
	}
	bookingID(t, book(s, 1, qtyHold(f1, "ECONOMY", 1), tok))
	// Spent: the same token again, even for a hold that would fit, queues.
	ticket, _ := queued(t, book(s, 1, qtyHold(f1, "ECONOMY", 1), tok))
	if old, _ := queued(t, book(s, 1, qtyHold(f1, "ECONOMY", 1), "")); old != ticket || strings.HasPrefix(ticket, path("t%d.1.1.", f1)) {
		t.Errorf("after spending ticket 1 the customer queues with %s, then %s; want one new ticket", ticket, old)
	}
	s.Clock.Advance(time.Second)
	tok2 := poll(t, s, 1, ticket).Token
	if tok2 == "" {
		t.Fatal("new ticket not admitted a second later")
	}
	bookingID(t, book(s, 1, qtyHold(f1, "ECONOMY", 1), tok2))

	// A token past its two minutes is refused.
	late := admit(3, f2)
	s.Clock.Advance(2*time.Minute + time.Second)
	if r := book(s, 3, qtyHold(f2, "ECONOMY", 1), late); r.Status != http.StatusTooManyRequests || r.Code() != "waiting_room" {
		t.Errorf("expired token: %d %s, want 429 waiting_room", r.Status, r.Body)
	}

	// Concurrent uses of one token: one hold at most.
	tok4 := admit(4, f2)
	rs := apptest.Race(10, func(int) *apptest.Response { return book(s, 4, qtyHold(f2, "ECONOMY", 1), tok4) })
	if got := apptest.Answers(rs); got["201"] != 1 || got["429 waiting_room"] != 9 {
		t.Errorf("one token used 10 times at once: %v, want one 201 and nine 429 waiting_room", got)
	}

	// Switched off, holds need no token.
	r := s.Do(apptest.Request{Method: http.MethodPatch, Path: path("/admin/flights/%d", f2), Token: s.Token("admin", 1),
		Body: map[string]any{"waitingRoom": map[string]any{"enabled": false}}})
	if r.Status != http.StatusOK || r.Map(t)["waitingRoom"].(map[string]any)["enabled"] != false {
		t.Fatalf("switch the room off: %d %s", r.Status, r.Body)
	}
	bookingID(t, book(s, 5, qtyHold(f2, "ECONOMY", 1), ""))
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
	bookingID(t, book(s, 2, qtyHold(flightID, "ECONOMY", 1), ""))

	openRoom(t, s, flightID, 5)
	ticket, _ := queued(t, book(s, 3, qtyHold(flightID, "ECONOMY", 1), ""))
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
	bookingID(t, book(s, 1, qtyHold(flightID, "ECONOMY", 1), ""))
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
	ticket, pos := queued(t, book(s, 1, qtyHold(flightID, "ECONOMY", 1), ""))
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
	again, pos := queued(t, book(s, 1, qtyHold(flightID, "ECONOMY", 1), ""))
	if again != ticket || pos != 0 {
		t.Errorf("asked again half a second later: position %d, same ticket %v; want 0 with the same ticket", pos, again == ticket)
	}
	s.Clock.Advance(time.Second)
	if fresh, _ := queued(t, book(s, 1, qtyHold(flightID, "ECONOMY", 1), "")); fresh == ticket {
		t.Error("a second later the ticket still came from memory; want Redis asked (a new ticket, since Redis lost the old one)")
	}
}
