package flight_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paytest"
)

// refused fails t unless p is the problem status with code.
func refused(t *testing.T, what string, p *apptest.Problem, status int, code string) {
	t.Helper()
	if !p.Is(status, code) {
		t.Fatalf("%s: %v, want %d %s", what, p, status, code)
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

// statusAndEvents returns booking id's status and how many events of typ
// it has.
func statusAndEvents(t *testing.T, pool *pgxpool.Pool, id int64, typ string) (status string, n int) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT status, (SELECT count(*) FROM outbox WHERE booking_id = $1 AND type = $2)
		FROM booking WHERE id = $1`, id, typ).Scan(&status, &n); err != nil {
		t.Fatal(err)
	}
	return status, n
}

// Joining, listing and leaving a line answer as docs/api.md says, and nobody
// reaches another customer's entry.
func TestWaitlistJoinListLeave(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 12, "AB")})
	join := func(customer int64, class string, n int) *apptest.Problem {
		_, p := s.Customer(customer).TryJoinWaitlist(t, flightID, class, n)
		return p
	}

	refused(t, "join with room", join(1, "ECONOMY", 1), http.StatusConflict, "invalid_state")
	// A line for more than the class has in all would wait for ever, and
	// hold up every walk-in meanwhile: refused, and the walk-in holds.
	_, p := s.Customer(4).TryJoinWaitlist(t, flightID, "ECONOMY", 3)
	refused(t, "join for 3 of a class of 2", p, http.StatusUnprocessableEntity, "validation_failed")
	if p.Field != "quantity" {
		t.Errorf("join for 3 of a class of 2 names %q, want quantity", p.Field)
	}
	s.Customer(9).HoldQuantity(t, flightID, "ECONOMY", 1)
	// One unit left: a pair may wait, a single should hold.
	refused(t, "join for 1 with 1 left", join(1, "ECONOMY", 1), http.StatusConflict, "invalid_state")
	w := s.Customer(1).JoinWaitlist(t, flightID, "ECONOMY", 2)
	if w.Status != "WAITING" || w.Position != 1 {
		t.Errorf("join = %+v, want WAITING at position 1", w)
	}
	first := w.WaitlistID
	refused(t, "join twice", join(1, "ECONOMY", 1), http.StatusConflict, "invalid_state")
	if second := s.Customer(2).JoinWaitlist(t, flightID, "ECONOMY", 2); second.Position != 2 {
		t.Errorf("second position = %d, want 2", second.Position)
	}
	refused(t, "unknown class", join(3, "FIRST", 1), http.StatusUnprocessableEntity, "validation_failed")
	// The flight is the path's: an unknown one is not found, as for every route of a flight.
	_, p = s.Customer(3).TryJoinWaitlist(t, flightID+1000, "ECONOMY", 2)
	refused(t, "unknown flight", p, http.StatusNotFound, "not_found")
	refused(t, "quantity 0", join(3, "ECONOMY", 0), http.StatusUnprocessableEntity, "validation_failed")
	refused(t, "quantity 10", join(3, "ECONOMY", 10), http.StatusUnprocessableEntity, "validation_failed")
	// A field the typed client cannot send: raw.
	if r := s.Do(apptest.Request{Method: http.MethodPost, Path: fmt.Sprintf("/flights/%d/waitlist", flightID), Token: s.Token("customer", 3),
		Body: `{"fareClass": "ECONOMY", "quantity": 1, "x": 1}`}); r.Status != http.StatusBadRequest || r.Code() != "invalid_request" {
		t.Fatalf("unknown field: %d %s, want 400 invalid_request", r.Status, r.Body)
	}
	_, p = s.Host(3).TryJoinWaitlist(t, flightID, "ECONOMY", 2)
	refused(t, "host joins", p, http.StatusForbidden, "forbidden")

	if l := s.Customer(1).Waitlist(t); len(l) != 1 || l[0].WaitlistID != first || l[0].FlightID != flightID ||
		l[0].FareClass != "ECONOMY" || l[0].Quantity != 2 {
		t.Errorf("GET /waitlist = %+v", l)
	}

	_, p = s.Customer(2).TryLeaveWaitlist(t, first)
	refused(t, "another's entry", p, http.StatusNotFound, "not_found")
	if e := waitEntry(t, s.App.Pool, first); e.status != "WAITING" {
		t.Errorf("after another's DELETE the entry is %s", e.status)
	}
	if left := s.Customer(1).LeaveWaitlist(t, first); left.Status != "CANCELLED" {
		t.Errorf("leave = %+v, want CANCELLED", left)
	}
	_, p = s.Customer(1).TryLeaveWaitlist(t, first)
	refused(t, "leave twice", p, http.StatusConflict, "invalid_state")
	// The second customer moves up.
	if l := s.Customer(2).Waitlist(t); len(l) != 1 || l[0].Position != 1 {
		t.Errorf("after the first left, GET /waitlist = %+v, want position 1", l)
	}
	// Leaving frees the way to join again.
	s.Customer(1).JoinWaitlist(t, flightID, "ECONOMY", 2)
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

	var holds []int64
	for c := range 3 {
		holds = append(holds, s.Customer(int64(10+c)).HoldQuantity(t, flightID, "ECONOMY", 1).BookingID)
	}
	// The second hold is extended: it would outlive the others.
	s.Clock.Advance(time.Minute)
	pair := s.Customer(1).JoinWaitlist(t, flightID, "ECONOMY", 2).WaitlistID
	single := s.Customer(2).JoinWaitlist(t, flightID, "ECONOMY", 1).WaitlistID
	_, p := s.Customer(11).TryExtend(t, holds[1])
	refused(t, "extend while a line waits", p, http.StatusConflict, "invalid_state")

	// A cancellation frees 1: the pair does not fit and keeps its place, the
	// single behind it is offered.
	s.Customer(10).Cancel(t, holds[0])
	if e := waitEntry(t, pool, pair); e.status != "WAITING" {
		t.Errorf("pair after 1 freed: %+v, want WAITING", e)
	}
	e := waitEntry(t, pool, single)
	if e.status != "OFFERED" || e.bookingID == 0 {
		t.Fatalf("single after 1 freed: %+v, want OFFERED", e)
	}
	offer := s.Customer(2).GetBooking(t, e.bookingID)
	if offer.Status != booking.Held || offer.Quantity != 1 || offer.HoldExpiresAt == nil || !offer.HoldExpiresAt.Equal(s.Clock.Now().Add(10*time.Minute)) {
		t.Errorf("offer = %+v, want HELD 1 unit until now + 10m", offer)
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
	third := s.Customer(3).JoinWaitlist(t, flightID, "ECONOMY", 1).WaitlistID
	s.Admin().SetOverbookLimit(t, flightID, "ECONOMY", 1)
	if e := waitEntry(t, pool, third); e.status != "OFFERED" {
		t.Errorf("third after the limit was raised: %+v, want OFFERED", e)
	}

	// The single's offer is not paid: it expires, the entry is DONE and its
	// unit goes to the next in line.
	fourth := s.Customer(4).JoinWaitlist(t, flightID, "ECONOMY", 1).WaitlistID
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
	h := s.Customer(10).HoldQuantity(t, flightID, "ECONOMY", 1).BookingID
	a := s.Customer(1).JoinWaitlist(t, flightID, "ECONOMY", 1).WaitlistID
	b := s.Customer(2).JoinWaitlist(t, flightID, "ECONOMY", 1).WaitlistID
	s.Customer(10).Cancel(t, h)
	ea := waitEntry(t, s.App.Pool, a)
	if ea.status != "OFFERED" {
		t.Fatalf("a = %+v, want OFFERED", ea)
	}
	_, p := s.Customer(1).TryLeaveWaitlist(t, a)
	refused(t, "leave an offered entry", p, http.StatusConflict, "invalid_state")
	s.Customer(1).Cancel(t, ea.bookingID) // declines the offer
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
	a := s.Customer(10).HoldQuantity(t, flightID, "ECONOMY", 2).BookingID
	s.Customer(11).HoldQuantity(t, flightID, "ECONOMY", 1)
	group := s.Customer(1).JoinWaitlist(t, flightID, "ECONOMY", 3).WaitlistID
	// 2 come back; the group of 3 does not fit and keeps its place.
	s.Customer(10).Cancel(t, a)
	if e := waitEntry(t, s.App.Pool, group); e.status != "WAITING" {
		t.Fatalf("group = %+v, want WAITING", e)
	}
	if _, p := s.Customer(20).TryHoldSeats(t, flightID, "ECONOMY", "12A"); !p.Is(http.StatusConflict, "sold_out") {
		t.Fatalf("walk-in seat hold: %v, want 409 sold_out", p)
	}
	if _, p := s.Customer(20).TryHoldQuantity(t, flightID, "ECONOMY", 1); !p.Is(http.StatusConflict, "sold_out") {
		t.Fatalf("walk-in quantity hold: %v, want 409 sold_out", p)
	}
	if pair := s.Customer(2).JoinWaitlist(t, flightID, "ECONOMY", 2); pair.Status != "OFFERED" || pair.BookingID == 0 {
		t.Errorf("pair = %+v, want OFFERED at once", pair)
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
	ctx := context.Background()
	h := s.Customer(10).HoldQuantity(t, flightID, "ECONOMY", 1).BookingID
	a := s.Customer(1).JoinWaitlist(t, flightID, "ECONOMY", 1).WaitlistID
	b := s.Customer(2).JoinWaitlist(t, flightID, "ECONOMY", 1).WaitlistID
	s.Customer(10).Cancel(t, h)
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
	if status, refunds := statusAndEvents(t, s.App.Pool, offer, "refund.requested"); status != "EXPIRED" || refunds != 1 {
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

// An overbooking limit is not lowered below an entry waiting in the line:
// the entry could never be offered, and every walk-in of the class would
// queue behind it for ever. Joins racing such a change never leave an
// entry larger than the class.
func TestOverbookLimitKeepsRoomForTheLine(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	patch := func(flightID int64, limit int) *apptest.Response {
		return s.Do(apptest.Request{Method: http.MethodPatch, Path: fmt.Sprintf("/admin/flights/%d/fares/ECONOMY", flightID),
			Token: s.Token("admin", 1), Body: fmt.Sprintf(`{"overbookLimit": %d}`, limit)})
	}
	// Capacity 2 plus 2 overbooked; 2 held, so a trio waits.
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, OverbookLimit: 2, Seats: apptest.Seats(12, 12, "AB")})
	s.Customer(9).HoldQuantity(t, flightID, "ECONOMY", 2)
	trio := s.Customer(1).JoinWaitlist(t, flightID, "ECONOMY", 3).WaitlistID
	if r := patch(flightID, 0); r.Status != http.StatusConflict || r.Code() != "invalid_state" {
		t.Fatalf("limit 0 under a waiting trio: %d %s, want 409 invalid_state", r.Status, r.Body)
	}
	var limit int
	if err := s.App.Pool.QueryRow(context.Background(), `SELECT overbook_limit FROM fare_inventory WHERE flight_id = $1`, flightID).
		Scan(&limit); err != nil || limit != 2 {
		t.Fatalf("after the refusal the limit is %d (%v), want 2 unchanged", limit, err)
	}
	// Room for the trio is enough.
	if f := s.Admin().SetOverbookLimit(t, flightID, "ECONOMY", 1); f.OverbookLimit == nil || *f.OverbookLimit != 1 {
		t.Errorf("limit 1 = %+v", f)
	}
	if e := waitEntry(t, s.App.Pool, trio); e.status != "WAITING" {
		t.Errorf("trio after limit 1: %+v, want WAITING", e)
	}

	// Joins and a cut of the limit, all at once, on fresh flights.
	for round := range 5 {
		flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, OverbookLimit: 2, Seats: apptest.Seats(12, 12, "AB")})
		s.Customer(9).HoldQuantity(t, flightID, "ECONOMY", 2)
		apptest.Race(9, func(i int) int {
			if i == 0 {
				return patch(flightID, 0).Status
			}
			_, p := s.Customer(int64(100*round+i)).TryJoinWaitlist(t, flightID, "ECONOMY", 3)
			if p != nil {
				return p.Status
			}
			return http.StatusCreated
		})
		var too int
		if err := s.App.Pool.QueryRow(context.Background(), `SELECT count(*) FROM waitlist w
			JOIN fare_inventory fi ON fi.flight_id = w.flight_id AND fi.fare_class = w.fare_class
			WHERE w.flight_id = $1 AND w.status = 'WAITING' AND w.quantity > fi.capacity + fi.overbook_limit`, flightID).Scan(&too); err != nil {
			t.Fatal(err)
		}
		if too != 0 {
			t.Errorf("round %d: %d waiting entries larger than the class", round, too)
		}
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}

// A quantity hold's units are for sale from its expiry on, not from the
// sweeper's next pass: the hold that finds the class full ends the overdue
// hold itself (recorded, with its event) and takes the unit; with a line
// waiting, the unit goes to the line.
func TestOverdueHoldGivesWayAtOnce(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 1})
	first := s.Customer(1).HoldQuantity(t, flightID, "ECONOMY", 1).BookingID
	_, p := s.Customer(2).TryHoldQuantity(t, flightID, "ECONOMY", 1)
	refused(t, "while held", p, http.StatusConflict, "sold_out")
	s.Clock.Advance(10*time.Minute + time.Millisecond)
	s.Customer(2).HoldQuantity(t, flightID, "ECONOMY", 1)
	if status, events := statusAndEvents(t, s.App.Pool, first, "booking.expired"); status != "EXPIRED" || events != 1 {
		t.Errorf("the overdue hold is %s with %d booking.expired events, want EXPIRED and 1", status, events)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())

	// Full again, and a line waits: the overdue unit is offered to it.
	waiting := s.Customer(3).JoinWaitlist(t, flightID, "ECONOMY", 1).WaitlistID
	s.Clock.Advance(10*time.Minute + time.Millisecond)
	_, p = s.Customer(4).TryHoldQuantity(t, flightID, "ECONOMY", 1)
	refused(t, "a walk-in while a line waits", p, http.StatusConflict, "sold_out")
	if e := waitEntry(t, s.App.Pool, waiting); e.status != "OFFERED" {
		t.Errorf("the line after the overdue hold was ended: %+v, want OFFERED", e)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}

// The line is for units others hold: a customer whose own hold sold the
// class out cannot wait for it (cancelling would hand the units straight
// back as a fresh offer, past the hold limit and the one extension), and
// a hold and a join of one customer sent at once are decided one after
// the other, so neither order leaves the customer both holding and
// waiting.
func TestWaitlistIsNotForYourOwnHold(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) {
		c.HoldLimit = config.Rate{N: 1000, Window: time.Hour}
	}})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(1, 1, "AB")})
	own := s.Customer(5).HoldQuantity(t, flightID, "ECONOMY", 2)
	_, p := s.Customer(5).TryJoinWaitlist(t, flightID, "ECONOMY", 1)
	refused(t, "join while holding the class", p, http.StatusConflict, "invalid_state")
	other := s.Customer(6).JoinWaitlist(t, flightID, "ECONOMY", 2)
	s.Customer(5).Cancel(t, own.BookingID)
	if e := waitEntry(t, s.App.Pool, other.WaitlistID); e.status != "OFFERED" {
		t.Fatalf("after the holder cancelled, the other customer's entry is %s, want OFFERED", e.status)
	}

	holdAndJoinAtOnce(t, s)

	// Without a hold limit, the holds take the same lock.
	off := apptest.Start(t, apptest.Options{Config: func(c *config.Config) { c.HoldLimit = config.Rate{} }})
	holdAndJoinAtOnce(t, off)
}

// holdAndJoinAtOnce races, eight times, a customer's hold of the last unit
// of a class (its other unit held by someone else) against the same
// customer joining the class's line: never both may pass.
func holdAndJoinAtOnce(t *testing.T, s *apptest.Server) {
	t.Helper()
	for round := range 8 {
		f := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(1, 1, "AB")})
		s.Customer(7).HoldQuantity(t, f, "ECONOMY", 1)
		c := s.Customer(int64(100 + round))
		start := make(chan struct{})
		var wg sync.WaitGroup
		var holdErr, joinErr *apptest.Problem
		wg.Go(func() { <-start; _, holdErr = c.TryHoldQuantity(t, f, "ECONOMY", 1) })
		wg.Go(func() { <-start; _, joinErr = c.TryJoinWaitlist(t, f, "ECONOMY", 1) })
		close(start)
		wg.Wait()
		if holdErr == nil && joinErr == nil {
			t.Fatalf("round %d: the customer both holds the last unit and waits in its line", round)
		}
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}
