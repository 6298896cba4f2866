package flight_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paytest"
)

func post(s *apptest.Server, customer int64, path string, body any) *apptest.Response {
	return s.Do(apptest.Request{Method: http.MethodPost, Path: path, Token: s.Token("customer", customer), Body: body})
}

func id(t *testing.T, r *apptest.Response, field string) int64 {
	t.Helper()
	v, ok := r.Map(t)[field].(float64)
	if !ok {
		t.Fatalf("answer has no %s: %d %s", field, r.Status, r.Body)
	}
	return int64(v)
}

func mustStatus(t *testing.T, what string, r *apptest.Response, status int, code string) {
	t.Helper()
	if r.Status != status || (code != "" && r.Code() != code) {
		t.Fatalf("%s: %d %s, want %d %s", what, r.Status, r.Body, status, code)
	}
}

type entry struct {
	status    string
	bookingID int64
}

func waitEntry(t *testing.T, pool *pgxpool.Pool, id int64) entry {
	t.Helper()
	var e entry
	if err := pool.QueryRow(context.Background(), `SELECT status, coalesce(booking_id, 0) FROM waitlist WHERE id = $1`, id).
		Scan(&e.status, &e.bookingID); err != nil {
		t.Fatal(err)
	}
	return e
}

// Joining, listing and leaving a line answer as docs/api.md says, and nobody
// reaches another customer's entry.
func TestWaitlistJoinListLeave(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 12, "AB")})
	path := fmt.Sprintf("/flights/%d/waitlist", flightID)
	join := func(customer int64, class string, n int) *apptest.Response {
		return post(s, customer, path, map[string]any{"fareClass": class, "quantity": n})
	}

	mustStatus(t, "join with room", join(1, "ECONOMY", 1), http.StatusConflict, "invalid_state")
	s.Customer(9).HoldQuantity(t, flightID, "ECONOMY", 1)
	// One unit left: a pair may wait, a single should hold.
	mustStatus(t, "join for 1 with 1 left", join(1, "ECONOMY", 1), http.StatusConflict, "invalid_state")
	r := join(1, "ECONOMY", 2)
	mustStatus(t, "join for 2 with 1 left", r, http.StatusCreated, "")
	if m := r.Map(t); m["status"] != "WAITING" || m["position"] != float64(1) {
		t.Errorf("join = %s, want WAITING at position 1", r.Body)
	}
	first := id(t, r, "waitlistId")
	mustStatus(t, "join twice", join(1, "ECONOMY", 1), http.StatusConflict, "invalid_state")
	second := join(2, "ECONOMY", 2)
	mustStatus(t, "second customer", second, http.StatusCreated, "")
	if p := second.Map(t)["position"]; p != float64(2) {
		t.Errorf("second position = %v, want 2", p)
	}
	mustStatus(t, "unknown class", join(3, "FIRST", 1), http.StatusUnprocessableEntity, "validation_failed")
	mustStatus(t, "quantity 0", join(3, "ECONOMY", 0), http.StatusUnprocessableEntity, "validation_failed")
	mustStatus(t, "quantity 10", join(3, "ECONOMY", 10), http.StatusUnprocessableEntity, "validation_failed")
	mustStatus(t, "unknown field", post(s, 3, path, map[string]any{"fareClass": "ECONOMY", "quantity": 1, "x": 1}),
		http.StatusBadRequest, "invalid_request")
	mustStatus(t, "host joins", s.Do(apptest.Request{Method: http.MethodPost, Path: path, Token: s.Token("host", 3),
		Body: map[string]any{"fareClass": "ECONOMY", "quantity": 2}}), http.StatusForbidden, "forbidden")

	list := s.Do(apptest.Request{Method: http.MethodGet, Path: "/waitlist", Token: s.Token("customer", 1)})
	var l struct {
		Waitlist []map[string]any `json:"waitlist"`
	}
	list.JSON(t, &l)
	if len(l.Waitlist) != 1 || l.Waitlist[0]["waitlistId"] != float64(first) || l.Waitlist[0]["flightId"] != float64(flightID) ||
		l.Waitlist[0]["fareClass"] != "ECONOMY" || l.Waitlist[0]["quantity"] != float64(2) {
		t.Errorf("GET /waitlist = %s", list.Body)
	}

	leave := func(customer, id int64) *apptest.Response {
		return s.Do(apptest.Request{Method: http.MethodDelete, Path: fmt.Sprintf("/waitlist/%d", id), Token: s.Token("customer", customer)})
	}
	mustStatus(t, "another's entry", leave(2, first), http.StatusNotFound, "not_found")
	if e := waitEntry(t, s.App.Pool, first); e.status != "WAITING" {
		t.Errorf("after another's DELETE the entry is %s", e.status)
	}
	r = leave(1, first)
	mustStatus(t, "leave", r, http.StatusOK, "")
	if m := r.Map(t); m["status"] != "CANCELLED" {
		t.Errorf("leave = %s, want CANCELLED", r.Body)
	}
	mustStatus(t, "leave twice", leave(1, first), http.StatusConflict, "invalid_state")
	// The second customer moves up.
	list = s.Do(apptest.Request{Method: http.MethodGet, Path: "/waitlist", Token: s.Token("customer", 2)})
	list.JSON(t, &l)
	if len(l.Waitlist) != 1 || l.Waitlist[0]["position"] != float64(1) {
		t.Errorf("after the first left, GET /waitlist = %s, want position 1", list.Body)
	}
	// Leaving frees the way to join again.
	mustStatus(t, "join again", join(1, "ECONOMY", 2), http.StatusCreated, "")
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}

// Freed units go to the line in the transaction that frees them: a
// cancellation, a sweep and a raised overbooking limit each offer; a group
// is offered all its units or none and keeps its place while a smaller
// entry behind it is served; an unpaid offer expires and passes on.
func TestWaitlistOffers(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 12, "ABC")})
	pool := s.App.Pool
	ctx := context.Background()
	path := fmt.Sprintf("/flights/%d/waitlist", flightID)

	var holds []int64
	for c := range 3 {
		holds = append(holds, s.Customer(int64(10+c)).HoldQuantity(t, flightID, "ECONOMY", 1).BookingID)
	}
	// The second hold is extended: it would outlive the others.
	s.Clock.Advance(time.Minute)
	pair := id(t, post(s, 1, path, map[string]any{"fareClass": "ECONOMY", "quantity": 2}), "waitlistId")
	single := id(t, post(s, 2, path, map[string]any{"fareClass": "ECONOMY", "quantity": 1}), "waitlistId")
	mustStatus(t, "extend while a line waits", post(s, 11, fmt.Sprintf("/bookings/%d/extend", holds[1]), nil),
		http.StatusConflict, "invalid_state")

	// A cancellation frees 1: the pair does not fit and keeps its place, the
	// single behind it is offered.
	mustStatus(t, "cancel", post(s, 10, fmt.Sprintf("/bookings/%d/cancel", holds[0]), nil), http.StatusOK, "")
	if e := waitEntry(t, pool, pair); e.status != "WAITING" {
		t.Errorf("pair after 1 freed: %+v, want WAITING", e)
	}
	e := waitEntry(t, pool, single)
	if e.status != "OFFERED" || e.bookingID == 0 {
		t.Fatalf("single after 1 freed: %+v, want OFFERED", e)
	}
	offer := s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/bookings/%d", e.bookingID), Token: s.Token("customer", 2)})
	m := offer.Map(t)
	if m["status"] != "HELD" || m["quantity"] != float64(1) || m["holdExpiresAt"] != s.Clock.Now().Add(10*time.Minute).Format(time.RFC3339) {
		t.Errorf("offer = %s, want HELD 1 unit until now + 10m", offer.Body)
	}
	var offered int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE type = 'waitlist.offered' AND booking_id = $1`, e.bookingID).Scan(&offered); err != nil {
		t.Fatal(err)
	}
	if offered != 1 {
		t.Errorf("%d waitlist.offered events for the offer, want 1", offered)
	}
	apptest.MustAudit(t, pool, s.Clock.Now())

	// The sweep expires the two other holds: 2 freed, the pair is offered
	// both at once.
	s.Clock.Advance(9 * time.Minute)
	if _, err := s.App.Sweeper.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	pe := waitEntry(t, pool, pair)
	if pe.status != "OFFERED" {
		t.Fatalf("pair after the sweep: %+v, want OFFERED", pe)
	}
	var qty int
	if err := pool.QueryRow(ctx, `SELECT quantity FROM booking WHERE id = $1 AND status = 'HELD'`, pe.bookingID).Scan(&qty); err != nil || qty != 2 {
		t.Errorf("pair's offer: quantity %d, err %v; want a HELD booking of 2", qty, err)
	}
	apptest.MustAudit(t, pool, s.Clock.Now())

	// A raised overbooking limit is offered to the next in line.
	third := id(t, post(s, 3, path, map[string]any{"fareClass": "ECONOMY", "quantity": 1}), "waitlistId")
	r := s.Do(apptest.Request{Method: http.MethodPatch, Path: fmt.Sprintf("/admin/flights/%d/fares/ECONOMY", flightID),
		Token: s.Token("admin", 1), Body: map[string]any{"overbookLimit": 1}})
	mustStatus(t, "raise the limit", r, http.StatusOK, "")
	if e := waitEntry(t, pool, third); e.status != "OFFERED" {
		t.Errorf("third after the limit was raised: %+v, want OFFERED", e)
	}

	// The single's offer is not paid: it expires, the entry is DONE and its
	// unit goes to the next in line.
	fourth := id(t, post(s, 4, path, map[string]any{"fareClass": "ECONOMY", "quantity": 1}), "waitlistId")
	s.Clock.Advance(90 * time.Second)
	if _, err := s.App.Sweeper.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if e := waitEntry(t, pool, single); e.status != "DONE" {
		t.Errorf("single after its offer expired: %+v, want DONE", e)
	}
	if e := waitEntry(t, pool, fourth); e.status != "OFFERED" {
		t.Errorf("fourth after the single's offer expired: %+v, want OFFERED", e)
	}
	apptest.MustAudit(t, pool, s.Clock.Now())
}

// An OFFERED entry cannot be left (its booking is cancelled instead), and
// cancelling the offer passes the units on.
func TestWaitlistDeclineOffer(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 12, "A")})
	path := fmt.Sprintf("/flights/%d/waitlist", flightID)
	h := s.Customer(10).HoldQuantity(t, flightID, "ECONOMY", 1).BookingID
	a := id(t, post(s, 1, path, map[string]any{"fareClass": "ECONOMY", "quantity": 1}), "waitlistId")
	b := id(t, post(s, 2, path, map[string]any{"fareClass": "ECONOMY", "quantity": 1}), "waitlistId")
	mustStatus(t, "cancel", post(s, 10, fmt.Sprintf("/bookings/%d/cancel", h), nil), http.StatusOK, "")
	ea := waitEntry(t, s.App.Pool, a)
	if ea.status != "OFFERED" {
		t.Fatalf("a = %+v, want OFFERED", ea)
	}
	mustStatus(t, "leave an offered entry", s.Do(apptest.Request{Method: http.MethodDelete, Path: fmt.Sprintf("/waitlist/%d", a),
		Token: s.Token("customer", 1)}), http.StatusConflict, "invalid_state")
	mustStatus(t, "decline", s.Do(apptest.Request{Method: http.MethodDelete, Path: fmt.Sprintf("/bookings/%d", ea.bookingID),
		Token: s.Token("customer", 1)}), http.StatusOK, "")
	if e := waitEntry(t, s.App.Pool, a); e.status != "DONE" {
		t.Errorf("a after declining = %+v, want DONE", e)
	}
	eb := waitEntry(t, s.App.Pool, b)
	if eb.status != "OFFERED" {
		t.Fatalf("b after a declined = %+v, want OFFERED", eb)
	}
	// b pays: the booking is confirmed and the entry is DONE.
	paytest.Pay(t, s, eb.bookingID)
	if e := waitEntry(t, s.App.Pool, b); e.status != "DONE" {
		t.Errorf("b after paying = %+v, want DONE", e)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}

// While a group waits for room the line keeps, a walk-in hold finds the
// class sold out, and a single who joins behind the group is served at
// once from that room.
func TestWaitlistKeepsRoomForTheLine(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 12, "ABC")})
	path := fmt.Sprintf("/flights/%d/waitlist", flightID)
	a := s.Customer(10).HoldQuantity(t, flightID, "ECONOMY", 2).BookingID
	s.Customer(11).HoldQuantity(t, flightID, "ECONOMY", 1)
	group := id(t, post(s, 1, path, map[string]any{"fareClass": "ECONOMY", "quantity": 3}), "waitlistId")
	// 2 come back; the group of 3 does not fit and keeps its place.
	mustStatus(t, "cancel", post(s, 10, fmt.Sprintf("/bookings/%d/cancel", a), nil), http.StatusOK, "")
	if e := waitEntry(t, s.App.Pool, group); e.status != "WAITING" {
		t.Fatalf("group = %+v, want WAITING", e)
	}
	if _, p := s.Customer(20).TryHoldSeats(t, flightID, "ECONOMY", "12A"); !p.Is(http.StatusConflict, "sold_out") {
		t.Fatalf("walk-in seat hold: %v, want 409 sold_out", p)
	}
	if _, p := s.Customer(20).TryHoldQuantity(t, flightID, "ECONOMY", 1); !p.Is(http.StatusConflict, "sold_out") {
		t.Fatalf("walk-in quantity hold: %v, want 409 sold_out", p)
	}
	r := post(s, 2, path, map[string]any{"fareClass": "ECONOMY", "quantity": 2})
	mustStatus(t, "a pair joins behind the group", r, http.StatusCreated, "")
	if m := r.Map(t); m["status"] != "OFFERED" || m["bookingId"] == nil {
		t.Errorf("pair = %s, want OFFERED at once", r.Body)
	}
	if e := waitEntry(t, s.App.Pool, group); e.status != "WAITING" {
		t.Errorf("group = %+v, want still WAITING", e)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}

// An offer's customer pays at the last moment while the sweeper expires
// the offer: the late money is never taken for a lapsed offer (refunded),
// the unit goes on to the next entry, and nothing is sold twice.
func TestWaitlistOfferExpiresWhileItsCustomerPays(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 12, "A")})
	path := fmt.Sprintf("/flights/%d/waitlist", flightID)
	ctx := context.Background()
	h := s.Customer(10).HoldQuantity(t, flightID, "ECONOMY", 1).BookingID
	a := id(t, post(s, 1, path, map[string]any{"fareClass": "ECONOMY", "quantity": 1}), "waitlistId")
	b := id(t, post(s, 2, path, map[string]any{"fareClass": "ECONOMY", "quantity": 1}), "waitlistId")
	mustStatus(t, "cancel", post(s, 10, fmt.Sprintf("/bookings/%d/cancel", h), nil), http.StatusOK, "")
	offer := waitEntry(t, s.App.Pool, a).bookingID
	s.Clock.Advance(10 * time.Minute) // the offer's deadline, to the microsecond

	charge := paytest.Charge(t, s.App.Pool, offer)
	rs := apptest.Race(2, func(i int) error {
		if i == 0 {
			if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, charge); r.Status != http.StatusOK {
				return fmt.Errorf("webhook: %d %s", r.Status, r.Body)
			}
			return nil
		}
		_, err := s.App.Sweeper.Pass(ctx)
		return err
	})
	for _, err := range rs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.App.Sweeper.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	var status string
	var refunds int
	if err := s.App.Pool.QueryRow(ctx, `SELECT status, (SELECT count(*) FROM outbox WHERE booking_id = $1 AND type = 'refund.requested')
		FROM booking WHERE id = $1`, offer).Scan(&status, &refunds); err != nil {
		t.Fatal(err)
	}
	if status != "EXPIRED" || refunds != 1 {
		t.Errorf("the lapsed offer is %s with %d refund requests, want EXPIRED and 1 (late money back)", status, refunds)
	}
	if e := waitEntry(t, s.App.Pool, a); e.status != "DONE" {
		t.Errorf("a = %+v, want DONE", e)
	}
	if e := waitEntry(t, s.App.Pool, b); e.status != "OFFERED" {
		t.Errorf("b = %+v, want OFFERED with the unit a's offer gave back", e)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}
