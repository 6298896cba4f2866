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

// waitColumns are the columns scanWait reads, of waitlist w as it reads at
// $1: an OFFERED entry whose offer has run out (its booking reads EXPIRED,
// see booking.AsOf) reads DONE from that instant, as the sweeper will
// record it; a WAITING entry reads DONE, at position 0, once its flight
// has departed: its line is closed and will never be offered anything.
const waitColumns = `w.id, w.flight_id, w.fare_class, w.customer_id, w.quantity,
	CASE WHEN w.status = 'OFFERED' AND EXISTS (SELECT 1 FROM booking b WHERE b.id = w.booking_id
		AND b.status = 'HELD' AND b.hold_expires_at <= $1) THEN 'DONE'
	WHEN w.status = 'WAITING' AND ` + lineClosed + ` THEN 'DONE' ELSE w.status END,
	coalesce(w.booking_id, 0), w.created_at,
	CASE WHEN w.status = 'WAITING' AND NOT ` + lineClosed + ` THEN (SELECT count(*) FROM waitlist o
		WHERE o.flight_id = w.flight_id AND o.fare_class = w.fare_class AND o.status = 'WAITING' AND o.id <= w.id)
	ELSE 0 END`

// lineClosed is the condition that entry w's flight has departed at $1.
const lineClosed = `(SELECT f.departure_at <= $1 FROM flight f WHERE f.id = w.flight_id)`

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
// ahead is offered at once. The database function join_waitlist (migration
// 00017) decides and writes it, by the rule a hold follows.
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
		// The line is for units others hold. A customer whose own hold sold
		// the class out would be first in line for it: cancelling, or letting
		// it run out, would hand the units straight back as a fresh offer,
		// past the hold limit and the one extension, while everyone behind
		// waits for ever longer. The lock is the one each hold of the
		// customer takes (hold_allowance), so a hold and a join of one
		// customer are decided one after the other, with or without
		// BERTH_HOLD_LIMIT; as there, it is taken before any other lock.
		// The holds are read by a statement of their own, after the lock:
		// one statement's snapshot is taken before it waits.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashint8($2))`, holdLockClass, customer); err != nil {
			return fmt.Errorf("lock the holds of customer %d: %w", customer, err)
		}
		var held int64
		err := tx.QueryRow(ctx, `SELECT coalesce((SELECT b.id FROM booking b WHERE b.customer_id = $1 AND b.status = 'HELD'
			AND b.flight_id = $2 AND b.fare_class = $3 ORDER BY b.id DESC LIMIT 1), 0)`,
			customer, flightID, class).Scan(&held)
		if err != nil {
			return fmt.Errorf("read holds of customer %d on flight %d: %w", customer, flightID, err)
		}
		if held != 0 {
			return fault.New(fault.InvalidState, "you hold units of fare class %s of flight %d yourself (booking %d): its line is for units others hold", class, flightID, held)
		}
		// A line for more units than the class will ever have would wait
		// for ever, and hold up every walk-in of the class meanwhile (they
		// queue behind a line that waits). The share lock keeps the size
		// until the entry is written: ChangeFare, which may shrink it,
		// locks the row for update and then looks at the line.
		var most int
		err = tx.QueryRow(ctx, `SELECT capacity + overbook_limit FROM fare_inventory WHERE flight_id = $1 AND fare_class = $2 FOR SHARE`,
			flightID, class).Scan(&most)
		switch {
		case err == nil && quantity > most:
			return fault.Invalid("quantity", "fare class %s of flight %d has %d units in all", class, flightID, most)
		case err != nil && !errors.Is(err, pgx.ErrNoRows): // no class: join_waitlist says which is missing
			return fmt.Errorf("read fare class %s of flight %d: %w", class, flightID, err)
		}
		var (
			code, detail *string
			id           *int64
		)
		err = tx.QueryRow(ctx, `SELECT o_code, o_detail, o_id FROM join_waitlist($1, $2, $3, $4, $5, $6)`,
			flightID, class, customer, quantity, now, s.offerTTL).Scan(&code, &detail, &id)
		if pg.Violates(err, "waitlist_one_active_key") {
			return fault.New(fault.InvalidState, "you are already in the line of fare class %s of flight %d", class, flightID)
		}
		if err != nil {
			return fmt.Errorf("join the waitlist of flight %d: %w", flightID, err)
		}
		if code != nil {
			return joinError(*code, detail, flightID, class)
		}
		out, err = getWait(ctx, tx, customer, *id, now)
		return err
	})
	return out, err
}

// holdLockClass is the class of the advisory lock hold_allowance (the
// database's) takes per customer before it decides a hold: 1650815604 is
// "bert" in ASCII.
const holdLockClass = 1650815604

// joinError words the error code of join_waitlist.
func joinError(code string, detail *string, flightID int64, class string) error {
	switch code {
	case "no_flight":
		// The flight is the path's (POST /flights/{id}/waitlist), not a
		// field of the body: an unknown one is a resource that is not there.
		return fault.New(fault.NotFound, "no flight %d", flightID)
	case "no_class":
		return fault.Invalid("fareClass", "flight %d has no fare class %s", flightID, class)
	case "departed":
		return fault.Invalid("flightId", "flight %d has departed", flightID)
	case "room":
		return fault.New(fault.InvalidState, "fare class %s of flight %d still has seats for that (%s left): hold instead", class, flightID, *detail)
	}
	return fmt.Errorf("join the waitlist of flight %d: unknown answer %q", flightID, code)
}

// getWait returns customer's entry id as it reads at now.
func getWait(ctx context.Context, db booking.Querier, customer, id int64, now time.Time) (*WaitEntry, error) {
	e, err := scanWait(db.QueryRow(ctx, `SELECT `+waitColumns+` FROM waitlist w WHERE w.id = $2 AND w.customer_id = $3`,
		now, id, customer))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fault.New(fault.NotFound, "no waitlist entry %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get waitlist entry %d: %w", id, err)
	}
	return e, nil
}

// Waitlist returns customer's entries as they read now, newest first (at
// most 100).
func (s *Service) Waitlist(ctx context.Context, customer int64) ([]*WaitEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+waitColumns+` FROM waitlist w WHERE w.customer_id = $2 ORDER BY w.id DESC LIMIT 100`,
		s.clock.Now(), customer)
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
		now := s.clock.Now()
		tag, err := tx.Exec(ctx, `UPDATE waitlist SET status = 'CANCELLED', updated_at = $3
			WHERE id = $1 AND customer_id = $2 AND status = 'WAITING'`, id, customer, now)
		if err != nil {
			return fmt.Errorf("leave waitlist entry %d: %w", id, err)
		}
		e, err := getWait(ctx, tx, customer, id, now)
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
// bucket rows changed, or the class quota grew). The database function
// offer_freed (migration 00017) decides and writes the offers, placing each
// entry's units as a hold of that quantity would be placed: an entry is
// offered its whole quantity or nothing, one that does not fit keeps its
// place while smaller ones behind it are served, and each offer is a HELD
// quantity booking until now + ttl (never past departure), with the events
// booking.held and waitlist.offered.
func offerFreed(ctx context.Context, tx pgx.Tx, flightID int64, class string, now time.Time, ttl time.Duration) error {
	if _, err := tx.Exec(ctx, outbox.WritesMark+`SELECT offer_freed($1, $2, $3, $4)`, flightID, class, now, ttl); err != nil {
		return fmt.Errorf("offer to the waitlist of flight %d: %w", flightID, err)
	}
	return nil
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
