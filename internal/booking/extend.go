package booking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
)

// Extender is an Inventory whose holds keep something of their own until
// the booking's deadline (a flight's seats), which must follow when the
// deadline moves.
type Extender interface {
	// Extended moves what b holds to b.HoldExpiresAt, in the caller's
	// transaction, after b's row was extended.
	Extended(ctx context.Context, tx pgx.Tx, b *Booking) error
}

// Extend moves the deadline of the caller's HELD booking id later by by,
// once per booking and never past the service's start (departure, pickup),
// and records the event booking.extended. A flight hold is not extended
// while a waitlist waits for its fare class: the units it holds are the
// next entry's the moment it lapses.
//
// The compare-and-set requires the hold to be still running at the
// server's now, so an extension and the sweeper at the deadline cannot
// both win: whichever locks the row first decides, and the other finds it
// no longer matching.
//
// Returns fault.NotFound if the booking is not the caller's,
// fault.InvalidState when it cannot be extended (not HELD, expired,
// already extended, already at its start, or a waitlist waits).
func (l *Lifecycle) Extend(ctx context.Context, db pg.Beginner, caller auth.Caller, id int64, by time.Duration) (*Booking, error) {
	var out *Booking
	err := pg.InTx(ctx, db, func(tx pgx.Tx) error {
		now := l.Clock.Now()
		b, err := Scan(tx.QueryRow(ctx, `UPDATE booking b
			SET hold_expires_at = least(b.hold_expires_at + $4::interval, b.starts_at),
				extended_at = $3, version = b.version + 1, updated_at = $3
			WHERE b.id = $1 AND b.customer_id = $2 AND b.status = 'HELD' AND b.hold_expires_at > $3
			  AND b.extended_at IS NULL AND b.hold_expires_at < b.starts_at
			  AND NOT EXISTS (SELECT 1 FROM waitlist w WHERE b.kind = 'flight' AND w.flight_id = b.flight_id
				AND w.fare_class = b.fare_class AND w.status = 'WAITING')
			RETURNING `+Columns, id, caller.ID, now, by))
		if errors.Is(err, pgx.ErrNoRows) {
			return l.whyNotExtended(ctx, tx, caller, id, now)
		}
		if err != nil {
			return fmt.Errorf("extend booking %d: %w", id, err)
		}
		inv, err := l.inventory(b.Kind)
		if err != nil {
			return err
		}
		if e, ok := inv.(Extender); ok {
			if err := e.Extended(ctx, tx, b); err != nil {
				return fmt.Errorf("extend booking %d: %w", id, err)
			}
		}
		out = b
		return outbox.Write(ctx, tx, outbox.Event{BookingID: b.ID, Type: outbox.BookingExtended, Data: b.View(), Time: now})
	})
	return out, err
}

// whyNotExtended tells the owner why booking id was not extended.
func (l *Lifecycle) whyNotExtended(ctx context.Context, tx pgx.Tx, caller auth.Caller, id int64, now time.Time) error {
	var (
		status           Status
		expires, starts  time.Time
		extended, queued bool
	)
	err := tx.QueryRow(ctx, `SELECT b.status, b.hold_expires_at, b.starts_at, b.extended_at IS NOT NULL,
			EXISTS (SELECT 1 FROM waitlist w WHERE b.kind = 'flight' AND w.flight_id = b.flight_id
				AND w.fare_class = b.fare_class AND w.status = 'WAITING')
		FROM booking b WHERE b.id = $1 AND b.customer_id = $2`, id, caller.ID).
		Scan(&status, &expires, &starts, &extended, &queued)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fault.New(fault.NotFound, "no booking %d", id)
	case err != nil:
		return fmt.Errorf("extend booking %d: %w", id, err)
	case status != Held:
		return fault.New(fault.InvalidState, "a booking that is %s cannot be extended", status)
	case !expires.After(now):
		return fault.New(fault.InvalidState, "the hold of booking %d expired at %s", id, expires.UTC().Format(time.RFC3339))
	case extended:
		return fault.New(fault.InvalidState, "booking %d was already extended once", id)
	case !expires.Before(starts):
		return fault.New(fault.InvalidState, "the hold of booking %d already lasts until the start", id)
	case queued:
		return fault.New(fault.InvalidState, "a waitlist is waiting for this fare class: the hold cannot be extended")
	}
	return fmt.Errorf("extend booking %d: no row matched and no reason found", id)
}
