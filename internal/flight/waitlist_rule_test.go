package flight_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/httpapi"
)

// A hold and a waitlist offer place a quantity in a fare class's buckets by
// one rule: from the same buckets (shares and counters), a hold of n units
// and an offer to an entry of n units either both fail for lack of room or
// take the same bucket and leave every bucket's share and held count the
// same. Each scenario is decided twice, in transactions rolled back.
func TestHoldAndWaitlistOfferPlaceUnitsAlike(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	const buckets, capacity = 4, 24
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 21, "AB"), Buckets: buckets})
	ctx := context.Background()
	now := s.Clock.Now()
	rng := rand.New(rand.NewPCG(17, 2026))

	// decide sets the buckets to quota and held, lets decide place units,
	// and returns the bucket it placed them in (-1: none) and the buckets
	// afterwards; then rolls everything back.
	decide := func(quota, held []int, place func(tx pgx.Tx) (int, error)) (int, string) {
		t.Helper()
		tx, err := s.App.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, `UPDATE fare_bucket fb SET quota = u.quota, held = u.held, sold = 0
			FROM unnest($3::int[], $4::int[]) WITH ORDINALITY AS u(quota, held, ord)
			WHERE fb.flight_id = $1 AND fb.fare_class = $2 AND fb.bucket = u.ord - 1`,
			flightID, "ECONOMY", quota, held); err != nil {
			t.Fatal(err)
		}
		bucket, err := place(tx)
		if err != nil {
			t.Fatal(err)
		}
		var after string
		if err := tx.QueryRow(ctx, `SELECT string_agg(bucket || ':' || quota || '/' || held, ' ' ORDER BY bucket)
			FROM fare_bucket WHERE flight_id = $1 AND fare_class = 'ECONOMY'`, flightID).Scan(&after); err != nil {
			t.Fatal(err)
		}
		return bucket, after
	}
	hold := func(units int) func(tx pgx.Tx) (int, error) {
		return func(tx pgx.Tx) (int, error) {
			var code *string
			var bucket *int
			err := tx.QueryRow(ctx, `SELECT o_code, (o_booking).fare_bucket FROM hold_flight($1, $2, '10 minutes',
				ARRAY[7]::bigint[], ARRAY['ECONOMY'], ARRAY[NULL]::text[], ARRAY[$3]::int[],
				ARRAY[NULL]::bigint[], ARRAY[NULL]::text[], ARRAY[NULL]::uuid[], false, 0, NULL)`, flightID, now, units).Scan(&code, &bucket)
			switch {
			case err != nil:
				return 0, err
			case code == nil:
				return *bucket, nil
			case *code == "sold_out":
				return -1, nil
			}
			return 0, fmt.Errorf("hold: %s", *code)
		}
	}
	offer := func(units int) func(tx pgx.Tx) (int, error) {
		return func(tx pgx.Tx) (int, error) {
			var entry int64
			if err := tx.QueryRow(ctx, `INSERT INTO waitlist (flight_id, fare_class, customer_id, quantity, created_at, updated_at)
				VALUES ($1, 'ECONOMY', 7, $2, $3, $3) RETURNING id`, flightID, units, now).Scan(&entry); err != nil {
				return 0, err
			}
			if _, err := tx.Exec(ctx, `SELECT offer_freed($1, 'ECONOMY', $2, '10 minutes')`, flightID, now); err != nil {
				return 0, err
			}
			var bucket *int
			err := tx.QueryRow(ctx, `SELECT b.fare_bucket FROM waitlist w LEFT JOIN booking b ON b.id = w.booking_id
				WHERE w.id = $1`, entry).Scan(&bucket)
			if err != nil || bucket == nil {
				return -1, err
			}
			return *bucket, nil
		}
	}

	placed, refused := 0, 0
	for range 300 {
		// Shares that add up to the class quota, each bucket some of it
		// used, and a quantity that fits sometimes only with share moved.
		quota, held := make([]int, buckets), make([]int, buckets)
		for range capacity {
			quota[rng.IntN(buckets)]++
		}
		for j := range held {
			held[j] = rng.IntN(quota[j] + 1)
		}
		units := 1 + rng.IntN(9)
		hb, hAfter := decide(quota, held, hold(units))
		ob, oAfter := decide(quota, held, offer(units))
		if hb != ob || hAfter != oAfter {
			t.Fatalf("buckets quota %v held %v, %d units: a hold takes bucket %d leaving %s, an offer bucket %d leaving %s",
				quota, held, units, hb, hAfter, ob, oAfter)
		}
		if hb < 0 {
			refused++
		} else {
			placed++
		}
	}
	// The scenarios must exercise both outcomes.
	if placed == 0 || refused == 0 {
		t.Fatalf("%d placed, %d refused: the scenarios do not cover both", placed, refused)
	}
}

// A cancellation frees units while walk-ins race to hold them and a
// customer joins the line: the line's entry is offered its whole quantity
// once, walk-ins get only units nobody in the line fits, and the class is
// never oversold. The goroutines start at once; winners are counted and
// the counters checked by the audit, for a few flights.
func TestWaitlistOfferAndHoldsRaceForFreedUnits(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	const holders, walkIns = 3, 12 // holders of 2 units each fill the 6 seats
	for round := range 3 {
		flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 12, "AB"), Buckets: 3})
		base := int64(1000 * (round + 1))
		held := make([]int64, holders)
		for i := range held {
			held[i] = s.Customer(base+int64(i)).HoldQuantity(t, flightID, "ECONOMY", 2).BookingID
		}
		first := s.Customer(base+100).JoinWaitlist(t, flightID, "ECONOMY", 3).WaitlistID

		rs := apptest.Race(holders+walkIns+1, func(i int) apptest.Attempt {
			switch {
			case i < holders:
				return apptest.Try(s.Customer(base+int64(i)).TryCancel(t, held[i]))
			case i < holders+walkIns:
				// A walk-in tries again while the line keeps the units,
				// so some try once it no longer does (bounded).
				var a apptest.Attempt
				for range 20 {
					if a = apptest.Try(s.Customer(base+200+int64(i)).TryHoldQuantity(t, flightID, "ECONOMY", 1)); a.Problem == nil || a.Problem.Code != "sold_out" {
						break
					}
				}
				return a
			}
			if _, p := s.Customer(base+300).TryJoinWaitlist(t, flightID, "ECONOMY", 1); p != nil && p.Code != "invalid_state" {
				t.Errorf("join: %s", p)
			}
			return apptest.Attempt{}
		})
		if c := apptest.Tally(rs[:holders]); c["ok"] != holders {
			t.Fatalf("cancellations = %v, want %d ok", c, holders)
		}
		walked := apptest.Tally(rs[holders : holders+walkIns])
		winners := walked["ok"]
		if walked["ok"]+walked["409 sold_out"] != walkIns {
			t.Fatalf("walk-ins = %v, want only ok and 409 sold_out", walked)
		}

		var offeredUnits, offers, waiting int
		if err := s.App.Pool.QueryRow(ctx, `SELECT coalesce(sum(b.quantity), 0), count(b.id), count(*) FILTER (WHERE w.status = 'WAITING')
			FROM waitlist w LEFT JOIN booking b ON b.id = w.booking_id AND b.status = 'HELD' AND b.quantity = w.quantity
			WHERE w.flight_id = $1`, flightID).Scan(&offeredUnits, &offers, &waiting); err != nil {
			t.Fatal(err)
		}
		c := fareCounters(t, s.App.Pool, flightID, "ECONOMY")
		t.Logf("round %d: %d walk-ins held, %d offers of %d units, %d waiting, counters %+v", round, winners, offers, offeredUnits, waiting, c)
		if e := waitEntry(t, s.App.Pool, first); e.status != "OFFERED" {
			t.Errorf("the first entry is %+v, want OFFERED: 6 units came back", e)
		}
		if c.held != offeredUnits+winners || c.held > 6 || c.sold != 0 || waiting > 0 && c.held < 6 {
			t.Errorf("held %d, want the %d offered units plus %d walk-ins, at most 6", c.held, offeredUnits, winners)
		}
		apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
	}
}

// GET /waitlist reads an entry as GET /bookings/{id} reads its offer: once
// the offer's hold has run out the offer reads EXPIRED and the entry DONE,
// before the sweeper records either, and so after.
func TestWaitlistReadsAnOfferThatRanOutAsDone(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 12, "A")})
	h := s.Customer(10).HoldQuantity(t, flightID, "ECONOMY", 1).BookingID
	a := s.Customer(1).JoinWaitlist(t, flightID, "ECONOMY", 1).WaitlistID
	s.Customer(10).Cancel(t, h)
	offer := waitEntry(t, s.App.Pool, a).bookingID

	status := func() string {
		t.Helper()
		l := s.Customer(1).Waitlist(t)
		if len(l) != 1 || l[0].WaitlistID != a {
			t.Fatalf("waitlist = %+v, want entry %d alone", l, a)
		}
		return l[0].Status
	}
	if st := status(); st != "OFFERED" {
		t.Fatalf("entry reads %s while its offer is live, want OFFERED", st)
	}
	s.Clock.Advance(10 * time.Minute) // the offer's deadline
	if b := s.Customer(1).GetBooking(t, offer); b.Status != "EXPIRED" {
		t.Fatalf("the offer reads %s at its deadline, want EXPIRED", b.Status)
	}
	if st := status(); st != "DONE" {
		t.Errorf("entry reads %s once its offer reads EXPIRED, before the sweep; want DONE", st)
	}
	if _, err := s.App.Sweeper.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := status(); st != "DONE" {
		t.Errorf("entry reads %s after the sweep, want DONE", st)
	}
}

// A line closes when its flight departs: an entry still waiting then reads
// DONE at position 0, though nothing was offered and the sweeper never
// touches it, and the customer's other entries are not affected.
func TestWaitlistEntryOfADepartedFlightReadsDone(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	early := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 1}) // departs at Epoch + 48h
	late := apptest.CreateFlight(t, s.URL, s.Token("admin", 99), apptest.Epoch.Add(96*time.Hour),
		apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 1})
	for _, f := range []int64{early, late} {
		s.Customer(10).HoldQuantity(t, f, "ECONOMY", 1)
		s.Customer(1).JoinWaitlist(t, f, "ECONOMY", 1)
	}
	read := func() map[int64]httpapi.WaitView {
		t.Helper()
		out := map[int64]httpapi.WaitView{}
		for _, e := range s.Customer(1).Waitlist(t) {
			out[e.FlightID] = e
		}
		return out
	}
	if l := read(); l[early].Status != "WAITING" || l[early].Position != 1 {
		t.Fatalf("before departure the entry reads %+v, want WAITING at 1", l[early])
	}
	s.Clock.Set(apptest.Epoch.Add(48 * time.Hour)) // the early flight departs
	l := read()
	if l[early].Status != "DONE" || l[early].Position != 0 {
		t.Errorf("after departure the entry reads %+v, want DONE at 0", l[early])
	}
	if l[late].Status != "WAITING" || l[late].Position != 1 {
		t.Errorf("the entry of the flight still to come reads %+v, want WAITING at 1", l[late])
	}
}

// The admin's fare counters read a hold as GET /bookings/{id} does: once
// it has run out it reads EXPIRED and its units are no longer counted
// held, before the sweeper records it, and so after.
func TestAdminCountersLeaveOutHoldsThatRanOut(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(12, 13, "AB")})
	counters := func() (held, available int) {
		t.Helper()
		r := s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/admin/flights/%d", flightID), Token: s.Token("admin", 1)})
		if r.Status != http.StatusOK {
			t.Fatalf("admin flight: %d %s", r.Status, r.Body)
		}
		var f struct {
			Fares []struct {
				Held      int `json:"held"`
				Available int `json:"available"`
			} `json:"fares"`
		}
		r.JSON(t, &f)
		if len(f.Fares) != 1 {
			t.Fatalf("admin flight = %s, want one fare", r.Body)
		}
		return f.Fares[0].Held, f.Fares[0].Available
	}
	short := s.Customer(1).HoldQuantity(t, flightID, "ECONOMY", 2).BookingID
	s.Clock.Advance(5 * time.Minute)
	s.Customer(2).HoldQuantity(t, flightID, "ECONOMY", 1) // runs out 5 minutes later
	if held, avail := counters(); held != 3 || avail != 1 {
		t.Fatalf("counters with two live holds: held %d, available %d; want 3 and 1", held, avail)
	}
	s.Clock.Advance(5 * time.Minute) // the first hold's deadline
	if b := s.Customer(1).GetBooking(t, short); b.Status != "EXPIRED" {
		t.Fatalf("the first hold reads %s at its deadline, want EXPIRED", b.Status)
	}
	if held, avail := counters(); held != 1 || avail != 3 {
		t.Errorf("counters before the sweep: held %d, available %d; want 1 and 3 (the live hold only)", held, avail)
	}
	if _, err := s.App.Sweeper.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if held, avail := counters(); held != 1 || avail != 3 {
		t.Errorf("counters after the sweep: held %d, available %d; want 1 and 3", held, avail)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}
