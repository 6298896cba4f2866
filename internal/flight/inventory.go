package flight

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
)

// inventory sells and releases the seats and fare counters of flight
// bookings, for the booking lifecycle. Lock order is the same everywhere:
// booking row, then seats in seat order, then the fare counter (the bucket
// the booking was counted in), then the fare class's waitlist.
type inventory struct {
	// offerTTL is how long a waitlist offer made with freed units lasts.
	offerTTL time.Duration
}

// Sell turns a confirmed booking's held seats SOLD and moves its units from
// held to sold. Every seat the booking lists must still be its own and HELD:
// a seat reclaimed after the hold expired makes the confirmation fail
// (booking.ErrIncomplete), never a booking with a missing seat.
func (inv inventory) Sell(ctx context.Context, tx pgx.Tx, b *booking.Booking) error {
	if len(b.Seats) > 0 {
		n, err := moveSeats(ctx, tx, b, "HELD", "SOLD")
		if err != nil {
			return err
		}
		if n != len(b.Seats) {
			return fmt.Errorf("%d of %d seats still held: %w", n, len(b.Seats), booking.ErrIncomplete)
		}
	}
	_, err := tx.Exec(ctx, `UPDATE fare_bucket SET held = held - $4, sold = sold + $4
		WHERE flight_id = $1 AND fare_class = $2 AND bucket = $3`, b.FlightID, b.FareClass, b.FareBucket, b.Quantity)
	if err != nil {
		return fmt.Errorf("move %d units of %s on flight %d to sold: %w", b.Quantity, b.FareClass, b.FlightID, err)
	}
	return offerSettled(ctx, tx, b)
}

// Release frees the seats a booking still has and gives its units back to
// the class quota. The counter goes down by the booking's own units even if
// some of its seats were reclaimed by a newer hold, which counted them
// again: counters err on the safe side until then, and are exact after.
// The freed units are offered at once to the class's waitlist, in the same
// transaction, so nobody can take them from the line in between.
func (inv inventory) Release(ctx context.Context, tx pgx.Tx, b *booking.Booking, was booking.Status) error {
	from, counter := "HELD", "held"
	if was != booking.Held {
		from, counter = "SOLD", "sold"
	}
	if len(b.Seats) > 0 {
		if _, err := moveSeats(ctx, tx, b, from, "AVAILABLE"); err != nil {
			return err
		}
	}
	if err := lockForLine(ctx, tx, b.FlightID, b.FareClass); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE fare_bucket SET `+counter+` = `+counter+` - $4
		WHERE flight_id = $1 AND fare_class = $2 AND bucket = $3`, b.FlightID, b.FareClass, b.FareBucket, b.Quantity)
	if err != nil {
		return fmt.Errorf("release %d units of %s on flight %d: %w", b.Quantity, b.FareClass, b.FlightID, err)
	}
	if was == booking.Held {
		if err := offerSettled(ctx, tx, b); err != nil {
			return err
		}
	}
	return offerFreed(ctx, tx, b.FlightID, b.FareClass, b.UpdatedAt, inv.offerTTL)
}

// Extended moves the deadline of a booking's held seats to the booking's
// new one: a seat is reclaimable once its held_until passed, so a seat left
// at the old deadline would be taken from an extended hold.
//
// It then makes sure no waitlist started waiting for the class meanwhile:
// the extension's own check ran on its statement's snapshot, and a join
// that committed after it would leave the entry waiting behind a hold that
// was extended anyway. Joining locks the class's buckets for update, so a
// share lock here waits for a join under way, and the check read after it
// sees its entry.
func (inventory) Extended(ctx context.Context, tx pgx.Tx, b *booking.Booking) error {
	if err := extendSeats(ctx, tx, b); err != nil {
		return err
	}
	// Two statements: the second's snapshot is taken after the lock.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM fare_bucket WHERE flight_id = $1 AND fare_class = $2 ORDER BY bucket FOR SHARE`,
		b.FlightID, b.FareClass); err != nil {
		return fmt.Errorf("lock the quota of flight %d: %w", b.FlightID, err)
	}
	var queued bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM waitlist WHERE flight_id = $1 AND fare_class = $2 AND status = 'WAITING')`,
		b.FlightID, b.FareClass).Scan(&queued)
	if err != nil {
		return fmt.Errorf("check the waitlist of flight %d: %w", b.FlightID, err)
	}
	if queued {
		return fault.New(fault.InvalidState, "a waitlist is waiting for this fare class: the hold cannot be extended")
	}
	return nil
}

// extendSeats moves b's held seats to its new deadline.
func extendSeats(ctx context.Context, tx pgx.Tx, b *booking.Booking) error {
	if len(b.Seats) == 0 {
		return nil
	}
	tag, err := tx.Exec(ctx, `WITH locked AS (
			SELECT seat_no FROM seat WHERE flight_id = $1 AND seat_no = ANY($2) AND booking_id = $3
			ORDER BY seat_no FOR UPDATE)
		UPDATE seat s SET held_until = $4
		FROM locked l
		WHERE s.flight_id = $1 AND s.seat_no = l.seat_no AND s.booking_id = $3 AND s.status = 'HELD'`,
		b.FlightID, b.Seats, b.ID, b.HoldExpiresAt)
	if err != nil {
		return fmt.Errorf("extend the seats of booking %d: %w", b.ID, err)
	}
	if int(tag.RowsAffected()) != len(b.Seats) {
		return fmt.Errorf("extend the seats of booking %d: %d of %d still held: %w", b.ID, tag.RowsAffected(), len(b.Seats), booking.ErrIncomplete)
	}
	return nil
}

// moveSeats moves the seats of booking b from one status to another, locking
// them in seat order, and returns how many moved.
func moveSeats(ctx context.Context, tx pgx.Tx, b *booking.Booking, from, to string) (int, error) {
	set := `status = 'SOLD', held_until = NULL`
	if to == "AVAILABLE" {
		set = `status = 'AVAILABLE', booking_id = NULL, held_until = NULL`
	}
	tag, err := tx.Exec(ctx, `WITH locked AS (
			SELECT seat_no FROM seat WHERE flight_id = $1 AND seat_no = ANY($2) AND booking_id = $3
			ORDER BY seat_no FOR UPDATE)
		UPDATE seat s SET `+set+`
		FROM locked l
		WHERE s.flight_id = $1 AND s.seat_no = l.seat_no AND s.booking_id = $3 AND s.status = $4`,
		b.FlightID, b.Seats, b.ID, from)
	if err != nil {
		return 0, fmt.Errorf("move seats of booking %d from %s to %s: %w", b.ID, from, to, err)
	}
	return int(tag.RowsAffected()), nil
}

// lockForLine locks every bucket of the class, in bucket order, when its
// waitlist has WAITING entries, before a release touches its own bucket:
// the offer that follows locks them all, and releases that each held one
// bucket first would deadlock on each other's. Without a line a release
// locks only its bucket, as before.
func lockForLine(ctx context.Context, tx pgx.Tx, flightID int64, class string) error {
	var queued bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM waitlist WHERE flight_id = $1 AND fare_class = $2
		AND status = 'WAITING')`, flightID, class).Scan(&queued); err != nil {
		return fmt.Errorf("read the waitlist of flight %d: %w", flightID, err)
	}
	if !queued {
		return nil
	}
	_, err := lockBuckets(ctx, tx, flightID, class)
	return err
}
