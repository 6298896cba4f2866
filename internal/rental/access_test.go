package rental_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/config"
)

// A host may hand a car over only from BERTH_PICKUP_EARLY (2h) before the
// rental until its end, and take it back only after that: outside it, 409
// invalid_state and nothing changes (not the booking, not the calendar,
// not the customer's right to cancel).
func TestPickupWindow(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("HN", "2h")
	from, to := at(10, 8, 0), at(13, 8, 0)
	id := e.book(1, c.ID, from, to)
	e.confirm(id)
	move := func(op string) *apptest.Response {
		return e.s.Do(apptest.Request{Method: http.MethodPost, Path: fmt.Sprintf("/bookings/%d/%s", id, op), Token: e.s.Token("host", 500)})
	}
	for _, tc := range []struct {
		name string
		now  time.Time
	}{
		{"ten days early", from.Add(-10 * 24 * time.Hour)},
		{"a second before the window", from.Add(-2*time.Hour - time.Second)},
		{"at the rental's end", to},
		{"after the rental", to.Add(time.Hour)},
	} {
		e.s.Clock.Set(tc.now)
		before := snapshot(t, e.pool())
		if r := move("pickup"); r.Status != http.StatusConflict || r.Code() != "invalid_state" {
			t.Errorf("pickup %s: %d %s, want 409 invalid_state", tc.name, r.Status, r.Body)
		}
		if r := move("return"); r.Status != http.StatusConflict || r.Code() != "invalid_state" {
			t.Errorf("return %s (before pickup): %d %s, want 409 invalid_state", tc.name, r.Status, r.Body)
		}
		if after := snapshot(t, e.pool()); after != before || e.status(id) != "CONFIRMED" {
			t.Errorf("refused hand-over %s changed the database: %+v → %+v, status %s", tc.name, before, after, e.status(id))
		}
	}
	// The customer can still cancel: nothing was handed over.
	e.s.Clock.Set(from.Add(-5 * 24 * time.Hour))
	if r := e.s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/bookings/%d/refund-quote", id),
		Token: e.s.Token("customer", 1)}); r.Status != http.StatusOK || r.Map(t)["refundAmount"] != float64(c.Deposit) {
		t.Errorf("refund quote five days ahead: %d %s, want the full deposit", r.Status, r.Body)
	}

	e.s.Clock.Set(from.Add(-2 * time.Hour))
	if r := move("pickup"); r.Status != http.StatusOK || r.Map(t)["status"] != "ON_TRIP" {
		t.Fatalf("pickup at the window's start: %d %s", r.Status, r.Body)
	}
	if r := move("return"); r.Status != http.StatusOK || r.Map(t)["status"] != "COMPLETED" {
		t.Fatalf("return after pickup: %d %s", r.Status, r.Body)
	}
	apptest.MustAudit(t, e.pool(), e.s.Clock.Now())
}

// BERTH_PICKUP_EARLY moves the window's start.
func TestPickupEarlySetting(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) { c.PickupEarly = 24 * time.Hour }})
	e := &env{t: t, s: s}
	c := e.listCar("HN", "2h")
	from := at(10, 8, 0)
	id := e.book(1, c.ID, from, at(11, 8, 0))
	e.confirm(id)
	pickup := func() *apptest.Response {
		return s.Do(apptest.Request{Method: http.MethodPost, Path: fmt.Sprintf("/bookings/%d/pickup", id), Token: s.Token("host", 500)})
	}
	s.Clock.Set(from.Add(-25 * time.Hour))
	if r := pickup(); r.Status != http.StatusConflict {
		t.Errorf("pickup 25h early with a 24h window: %d %s, want 409", r.Status, r.Body)
	} else if m := r.Map(t); m["pickupFrom"] != from.Add(-24*time.Hour).Format(time.RFC3339) || m["pickupUntil"] != at(11, 8, 0).Format(time.RFC3339) {
		t.Errorf("the refusal names the window %v – %v, want %s – %s", m["pickupFrom"], m["pickupUntil"],
			from.Add(-24*time.Hour).Format(time.RFC3339), at(11, 8, 0).Format(time.RFC3339))
	}
	s.Clock.Set(from.Add(-23 * time.Hour))
	if r := pickup(); r.Status != http.StatusOK {
		t.Errorf("pickup 23h early with a 24h window: %d %s, want 200", r.Status, r.Body)
	}
}

// The token's role decides what the caller acts as: every booking route ×
// every role × owner or not. Customer 1 rents host 500's car; the tricky
// callers are a customer token whose sub is the host's id (it must not act
// as the host) and a host token whose sub is the customer's id (it must not
// act as the customer).
func TestRoleDecidesWhatTheCallerActsAs(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("HN", "2h")
	e.s.Clock.Set(at(1, 8, 0))
	id := e.book(1, c.ID, at(10, 8, 0), at(13, 8, 0))
	e.confirm(id)
	other := e.book(2, c.ID, at(20, 8, 0), at(21, 8, 0)) // someone else's, held

	type caller struct {
		name, role string
		sub        int64
	}
	var (
		owner        = caller{"the customer", "customer", 1}
		stranger     = caller{"another customer", "customer", 2}
		customerHost = caller{"a customer token with the host's sub", "customer", 500}
		carHost      = caller{"the car's host", "host", 500}
		hostCustomer = caller{"a host token with the customer's sub", "host", 1}
		otherHost    = caller{"another host", "host", 501}
		admin        = caller{"an admin", "admin", 9}
	)
	all := []caller{owner, stranger, customerHost, carHost, hostCustomer, otherHost, admin}
	path := func(suffix string) string { return fmt.Sprintf("/bookings/%d%s", id, suffix) }
	type want struct {
		status int
		code   string
	}
	ok, notFound, forbidden := want{200, ""}, want{404, "not_found"}, want{403, "forbidden"}
	// Reads and quotes change nothing, so every caller tries every one.
	routes := []struct {
		method, path string
		want         map[caller]want
	}{
		{http.MethodGet, path(""), map[caller]want{owner: ok, carHost: ok, admin: ok}},
		{http.MethodGet, path("/refund-quote"), map[caller]want{owner: ok, carHost: ok, admin: ok}},
		{http.MethodGet, path("/events"), map[caller]want{owner: ok, carHost: ok, admin: ok}},
		// Refused ones only here: the successful hand-over is below.
		{http.MethodPost, path("/payments"), map[caller]want{owner: {409, "invalid_state"}, carHost: forbidden,
			hostCustomer: forbidden, otherHost: forbidden, admin: forbidden}},
		{http.MethodPost, path("/return"), map[caller]want{owner: forbidden, stranger: forbidden, customerHost: forbidden,
			carHost: {409, "invalid_state"}, admin: {409, "invalid_state"}}},
	}
	before := snapshot(t, e.pool())
	for _, rt := range routes {
		for _, who := range all {
			w, listed := rt.want[who]
			if !listed {
				w = notFound
			}
			r := e.s.Do(apptest.Request{Method: rt.method, Path: rt.path, Token: e.s.Token(who.role, who.sub),
				Header: map[string]string{"Idempotency-Key": fmt.Sprintf("k-%d", seq.Add(1))}})
			if r.Status != w.status || (w.code != "" && r.Code() != w.code) {
				t.Errorf("%s %s by %s: %d %s, want %d %s", rt.method, rt.path, who.name, r.Status, r.Body, w.status, w.code)
			}
		}
	}
	// Cancellation and pickup by those who may not: 404 or 403, nothing changes.
	for _, who := range []caller{stranger, customerHost, hostCustomer, otherHost} {
		for _, m := range []struct{ method, path string }{{http.MethodDelete, path("")}, {http.MethodPost, path("/cancel")}} {
			if r := e.s.Do(apptest.Request{Method: m.method, Path: m.path, Token: e.s.Token(who.role, who.sub)}); r.Status != 404 {
				t.Errorf("%s %s by %s: %d %s, want 404", m.method, m.path, who.name, r.Status, r.Body)
			}
		}
	}
	e.s.Clock.Set(at(10, 8, 0))
	for _, who := range all {
		w := notFound
		switch who {
		case owner, stranger, customerHost:
			w = forbidden
		case carHost, admin:
			continue
		}
		if r := e.s.Do(apptest.Request{Method: http.MethodPost, Path: path("/pickup"), Token: e.s.Token(who.role, who.sub)}); r.Status != w.status {
			t.Errorf("pickup by %s: %d %s, want %d", who.name, r.Status, r.Body, w.status)
		}
	}
	if after := snapshot(t, e.pool()); after != before {
		t.Errorf("refused requests changed the database: %+v → %+v", before, after)
	}
	// What a cancellation would refund shows who it counts as: the
	// customer by policy, the host and the admin in full.
	e.s.Clock.Set(at(9, 20, 0)) // 12h before pickup: the customer gets nothing back
	for who, rule := range map[caller]string{owner: "policy", carHost: "seller", admin: "seller"} {
		r := e.s.Do(apptest.Request{Method: http.MethodGet, Path: path("/refund-quote"), Token: e.s.Token(who.role, who.sub)})
		if r.Status != http.StatusOK || r.Map(t)["rule"] != rule {
			t.Errorf("refund quote for %s: %d %s, want rule %s", who.name, r.Status, r.Body, rule)
		}
	}

	// GET /bookings lists what the role reaches: a customer their own, a
	// host their cars', an admin every booking.
	for _, tc := range []struct {
		who  caller
		want []int64
	}{
		{owner, []int64{id}}, {stranger, []int64{other}}, {customerHost, nil}, {carHost, []int64{other, id}},
		{hostCustomer, nil}, {otherHost, nil}, {admin, []int64{other, id}},
	} {
		var got []int64
		for _, b := range (apptest.Client{Base: e.s.URL, Token: e.s.Token(tc.who.role, tc.who.sub)}).Bookings(t, "") {
			got = append(got, b.BookingID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("GET /bookings by %s: %v, want %v", tc.who.name, got, tc.want)
		}
	}

	// The customer token with the host's sub cannot cancel as the host;
	// the real host's cancellation refunds in full.
	if v := e.s.Host(500).Cancel(t, id); v.Status != booking.Cancelled || v.CancelReason != booking.ByHost ||
		v.RefundAmount == nil || *v.RefundAmount != c.Deposit {
		t.Errorf("the host cancels: %+v, want CANCELLED by host with the full deposit back", v)
	}
	if _, err := e.s.App.Sweeper.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	apptest.MustAudit(t, e.pool(), e.s.Clock.Now())
}

// The same person under another role is no way around their own refund
// rule: a host who booked their own car as a customer, or an admin who
// booked for themselves, gets the customer's refund when they cancel with
// the host's or the admin's token, and the cancellation counts as theirs.
func TestAnotherRoleIsNoWayAroundTheRefundRule(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("HN", "2h")
	e.s.Clock.Set(at(1, 8, 0))
	for _, tc := range []struct {
		name, role string
		sub        int64
		from       time.Time
	}{
		{"the car's host", "host", 500, at(10, 8, 0)},
		{"an admin", "admin", 9, at(12, 8, 0)},
	} {
		id := e.book(tc.sub, c.ID, tc.from, tc.from.Add(24*time.Hour))
		e.confirm(id)
		e.s.Clock.Set(tc.from.Add(-12 * time.Hour)) // under 24h before pickup: the customer's policy refunds nothing
		as := apptest.Client{Base: e.s.URL, Token: e.s.Token(tc.role, tc.sub)}
		r := e.s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/bookings/%d/refund-quote", id), Token: as.Token})
		if q := r.Map(t); r.Status != http.StatusOK || q["rule"] != "policy" || q["refundAmount"] != float64(0) {
			t.Errorf("%s quotes their own booking: %d %s, want rule policy and nothing back", tc.name, r.Status, r.Body)
		}
		if v := as.Cancel(t, id); v.Status != booking.Cancelled || v.CancelReason != booking.ByCustomer ||
			v.RefundAmount == nil || *v.RefundAmount != 0 {
			t.Errorf("%s cancels their own booking: %+v, want CANCELLED by customer with nothing back", tc.name, v)
		}
	}
	apptest.MustAudit(t, e.pool(), e.s.Clock.Now())
}
