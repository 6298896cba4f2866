package flight

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
)

// A sold-out fare class has a line: customers join it for a quantity, and
// whatever frees units of the class (a hold expiring or swept, a
// cancellation, a raised overbooking limit) offers them, in the same
// transaction, to the first entries that fit, as HELD quantity bookings.
// Nobody else can take the units in between, since they are never free at
// a commit while a fitting entry waits. While a line waits, the class is
// sold out to holds from outside it: units freed one at a time are kept
// for a group at the head of the line rather than taken by walk-ins, and a
// smaller entry that joins behind the group is offered them at once.
//
// Locks: whatever frees units has already locked its bucket row; the offer
// then locks the line's WAITING entries (in line order) and every bucket of
// the class (in bucket order). Joining locks every bucket of the class
// before it looks at the room, so a join and a release are serialised: the
// join either sees the units the release freed (and is told to hold
// instead), or its entry is committed before the release looks at the line.
// With more than one bucket per class two releases may deadlock on each
// other's buckets; PostgreSQL breaks the cycle and pg.InTx runs the loser
// again.

// The statuses of a waitlist entry.
const (
	WaitWaiting   = "WAITING"
	WaitOffered   = "OFFERED"
	WaitDone      = "DONE"
	WaitCancelled = "CANCELLED"
)

// WaitEntry is one customer's place in the line of a fare class.
type WaitEntry struct {
	ID         int64
	FlightID   int64
	FareClass  string
	CustomerID int64
	Quantity   int
	Status     string
	// Position is the entry's place among the WAITING entries of its line
	// (1 is next); 0 when it is not waiting.
	Position  int
	BookingID int64 // the offer, once OFFERED
	CreatedAt time.Time
}

const waitColumns = `w.id, w.flight_id, w.fare_class, w.customer_id, w.quantity, w.status, coalesce(w.booking_id, 0), w.created_at,
	CASE WHEN w.status = 'WAITING' THEN (SELECT count(*) FROM waitlist o WHERE o.flight_id = w.flight_id
		AND o.fare_class = w.fare_class AND o.status = 'WAITING' AND o.id <= w.id) ELSE 0 END`

func scanWait(row pgx.Row) (*WaitEntry, error) {
	var e WaitEntry
	err := row.Scan(&e.ID, &e.FlightID, &e.FareClass, &e.CustomerID, &e.Quantity, &e.Status, &e.BookingID, &e.CreatedAt, &e.Position)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// JoinWaitlist puts customer in the line of a fare class for quantity
// units. The class must be sold out for that quantity, or have a line
// already (whose room is kept for it): otherwise the customer is told to
// hold instead. An entry that fits the room a line keeps for a larger one
// ahead is offered at once.
//
// Returns fault.ValidationFailed (bad quantity, unknown flight or class, a
// departed flight), fault.InvalidState (room for the quantity, or the
// customer already in that line).
func (s *Service) JoinWaitlist(ctx context.Context, customer, flightID int64, class string, quantity int) (*WaitEntry, error) {
	switch {
	case class == "" || !classRe.MatchString(class):
		return nil, fault.Invalid("fareClass", "no fare class %q", class)
	case quantity < 1 || quantity > MaxSeats:
		return nil, fault.Invalid("quantity", "must be between 1 and %d", MaxSeats)
	}
	var out *WaitEntry
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		now := s.clock.Now()
		info, err := loadFlight(ctx, tx, flightID, []string{class})
		if err != nil {
			return err
		}
		r := HoldRequest{FlightID: flightID, FareClass: class, Quantity: quantity}
		if _, err := info.check(&r, now); err != nil && fault.CodeOf(err) != fault.SoldOut {
			return err
		}
		bs, err := lockBuckets(ctx, tx, flightID, class)
		if err != nil {
			return err
		}
		// Read again under the bucket locks: a release that committed
		// before them has offered its units to the line already.
		var queued bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM waitlist WHERE flight_id = $1 AND fare_class = $2
			AND status = 'WAITING')`, flightID, class).Scan(&queued); err != nil {
			return fmt.Errorf("join the waitlist of flight %d: %w", flightID, err)
		}
		if room := classRoom(bs); room >= quantity && !queued {
			return fault.New(fault.InvalidState, "fare class %s of flight %d has %d units left: hold instead", class, flightID, room)
		}
		var id int64
		err = tx.QueryRow(ctx, `INSERT INTO waitlist (flight_id, fare_class, customer_id, quantity, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $5) RETURNING id`, flightID, class, customer, quantity, now).Scan(&id)
		if pg.Violates(err, "waitlist_one_active_key") {
			return fault.New(fault.InvalidState, "you are already in the line of fare class %s of flight %d", class, flightID)
		}
		if err != nil {
			return fmt.Errorf("join the waitlist of flight %d: %w", flightID, err)
		}
		// Room the line keeps for an entry that does not fit yet goes to a
		// smaller one that joins behind it, at once.
		if err := offerFreed(ctx, tx, flightID, class, now, s.offerTTL); err != nil {
			return err
		}
		out, err = getWait(ctx, tx, customer, id)
		return err
	})
	return out, err
}

func getWait(ctx context.Context, db booking.Querier, customer, id int64) (*WaitEntry, error) {
	e, err := scanWait(db.QueryRow(ctx, `SELECT `+waitColumns+` FROM waitlist w WHERE w.id = $1 AND w.customer_id = $2`, id, customer))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fault.New(fault.NotFound, "no waitlist entry %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get waitlist entry %d: %w", id, err)
	}
	return e, nil
}

// Waitlist returns customer's entries, newest first (at most 100).
func (s *Service) Waitlist(ctx context.Context, customer int64) ([]*WaitEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+waitColumns+` FROM waitlist w WHERE w.customer_id = $1 ORDER BY w.id DESC LIMIT 100`, customer)
	if err != nil {
		return nil, fmt.Errorf("list waitlist of %d: %w", customer, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*WaitEntry, error) { return scanWait(r) })
	if err != nil {
		return nil, fmt.Errorf("list waitlist of %d: %w", customer, err)
	}
	return out, nil
}

// LeaveWaitlist takes customer's WAITING entry id out of its line.
//
// Returns fault.NotFound when the entry is not the customer's and
// fault.InvalidState when it is not waiting (an offered entry is declined
// by cancelling its booking).
func (s *Service) LeaveWaitlist(ctx context.Context, customer, id int64) (*WaitEntry, error) {
	var out *WaitEntry
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE waitlist SET status = 'CANCELLED', updated_at = $3
			WHERE id = $1 AND customer_id = $2 AND status = 'WAITING'`, id, customer, s.clock.Now())
		if err != nil {
			return fmt.Errorf("leave waitlist entry %d: %w", id, err)
		}
		e, err := getWait(ctx, tx, customer, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			if e.Status == WaitOffered {
				return fault.New(fault.InvalidState, "entry %d was offered booking %d: cancel that booking to decline", id, e.BookingID)
			}
			return fault.New(fault.InvalidState, "entry %d is %s", id, e.Status)
		}
		out = e
		return nil
	})
	return out, err
}

// offerFreed offers the room of a fare class to the first WAITING entries
// of its line that fit, within tx, which has just freed units of it (its
// bucket rows changed, or the class quota grew). An entry is offered its
// whole quantity or nothing; one that does not fit keeps its place while
// smaller ones behind it are served. Each offer is a HELD quantity booking
// until now + ttl (never past departure), the entry OFFERED with it, and
// the events booking.held and waitlist.offered.
func offerFreed(ctx context.Context, tx pgx.Tx, flightID int64, class string, now time.Time, ttl time.Duration) error {
	rows, err := tx.Query(ctx, `SELECT id, customer_id, quantity FROM waitlist
		WHERE flight_id = $1 AND fare_class = $2 AND status = 'WAITING' ORDER BY id FOR UPDATE`, flightID, class)
	if err != nil {
		return fmt.Errorf("read the waitlist of flight %d: %w", flightID, err)
	}
	type waiting struct {
		id, customer int64
		quantity     int
	}
	var line []waiting
	var w waiting
	if _, err := pgx.ForEachRow(rows, []any{&w.id, &w.customer, &w.quantity}, func() error {
		line = append(line, w)
		return nil
	}); err != nil {
		return fmt.Errorf("read the waitlist of flight %d: %w", flightID, err)
	}
	if len(line) == 0 {
		return nil
	}
	info, err := loadFlight(ctx, tx, flightID, []string{class})
	if err != nil {
		return err
	}
	fare, ok := info.fares[class]
	if !ok || !info.departure.After(now) {
		return nil // nothing can be offered on a departed flight
	}
	bs, err := lockBuckets(ctx, tx, flightID, class)
	if err != nil {
		return err
	}
	var (
		offers  []planned
		entries []int64
	)
	for _, e := range line {
		if classRoom(bs) < e.quantity {
			if classRoom(bs) == 0 {
				break
			}
			continue // keeps its place; a smaller entry behind may fit
		}
		target := roomiest(bs)
		if !allocate(bs, target, e.quantity) {
			return fmt.Errorf("offer to waitlist entry %d: %d units do not fit", e.id, e.quantity)
		}
		offers = append(offers, planned{
			req:  HoldRequest{CustomerID: e.customer, FlightID: flightID, FareClass: class, Quantity: e.quantity},
			fare: fare, bucket: target,
		})
		entries = append(entries, e.id)
	}
	if len(offers) == 0 {
		return nil
	}
	made, err := insertBookings(ctx, tx, info, offers, now, ttl)
	if err != nil {
		return err
	}
	ids := make([]int64, len(made))
	for i, b := range made {
		ids[i] = b.ID
	}
	tag, err := tx.Exec(ctx, `UPDATE waitlist w SET status = 'OFFERED', booking_id = u.booking, updated_at = $3
		FROM unnest($1::bigint[], $2::bigint[]) AS u(entry, booking)
		WHERE w.id = u.entry AND w.status = 'WAITING'`, entries, ids, now)
	if err != nil {
		return fmt.Errorf("offer to the waitlist of flight %d: %w", flightID, err)
	}
	if int(tag.RowsAffected()) != len(entries) {
		return fmt.Errorf("offer to the waitlist of flight %d: %d of %d entries were still waiting", flightID, tag.RowsAffected(), len(entries))
	}
	for _, b := range made {
		if err := booking.Record(ctx, tx, b, now); err != nil {
			return err
		}
		err := outbox.Write(ctx, tx, outbox.Event{BookingID: b.ID, Type: outbox.WaitlistOffered, Time: now, Data: b.View()})
		if err != nil {
			return err
		}
	}
	return writeBuckets(ctx, tx, flightID, map[string][]bucket{class: bs})
}

// offerSettled marks the waitlist entry whose offer b was DONE, now that b
// left HELD (paid, expired or cancelled).
func offerSettled(ctx context.Context, tx pgx.Tx, b *booking.Booking) error {
	_, err := tx.Exec(ctx, `UPDATE waitlist SET status = 'DONE', updated_at = $2 WHERE booking_id = $1 AND status = 'OFFERED'`,
		b.ID, b.UpdatedAt)
	if err != nil {
		return fmt.Errorf("settle the offer of booking %d: %w", b.ID, err)
	}
	return nil
}
