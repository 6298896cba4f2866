package flight

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
)

// AssignSeats gives the customer's quantity booking id the seats listed:
// exactly its quantity, all of its fare class, all or nothing. A HELD
// booking's seats are held until its deadline, a CONFIRMED one's sold.
// The booking moves to its next version and the event
// booking.seats_assigned is written.
//
// Locks follow the global order: the booking row (its compare-and-set),
// then the seats in seat order, whatever order the client sent, so an
// assignment never deadlocks against a group hold of the same seats.
//
// Returns fault.NotFound when the booking is not the customer's,
// fault.ValidationFailed (wrong count, duplicate, unknown or other-class
// seats), fault.InvalidState (not a flight quantity booking that is HELD
// and running or CONFIRMED, or seats already assigned) and
// fault.SeatUnavailable when one of the seats is taken.
func (s *Service) AssignSeats(ctx context.Context, customer, id int64, seats []string) (*booking.Booking, error) {
	var out *booking.Booking
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		now := s.clock.Now()
		b, err := booking.Get(ctx, tx, auth.Caller{ID: customer, Role: auth.Customer}, id, now)
		if err != nil {
			return err
		}
		if b.CustomerID != customer {
			return fault.New(fault.NotFound, "no booking %d", id)
		}
		r := HoldRequest{CustomerID: customer, FlightID: b.FlightID, FareClass: b.FareClass, Seats: seats}
		if b.Kind == booking.KindFlight {
			if err := r.Validate(); err != nil {
				return err
			}
		}
		switch {
		case b.Kind != booking.KindFlight || len(b.Seats) > 0:
			return fault.New(fault.InvalidState, "booking %d is not a flight booking waiting for its seats", id)
		case b.Status != booking.Held && b.Status != booking.Confirmed:
			// A hold that ran out reads EXPIRED (booking.AsOf).
			return fault.New(fault.InvalidState, "seats cannot be assigned to a booking that is %s", b.Status)
		case len(r.Seats) != b.Quantity:
			return fault.Invalid("seats", "booking %d is for %d seats, not %d", id, b.Quantity, len(r.Seats))
		}
		// The compare-and-set: exactly one assignment wins the booking, and
		// the row stays locked against the sweeper and a confirmation. It is
		// a change of the booking like any other: a new version, and its
		// event below.
		nb, err := booking.Scan(tx.QueryRow(ctx, `UPDATE booking SET seats = $3::text[], version = version + 1, updated_at = $4
			WHERE id = $1 AND status = $2 AND seats IS NULL AND (status <> 'HELD' OR hold_expires_at > $4)
			RETURNING `+booking.Columns, id, b.Status, r.Seats, now))
		if errors.Is(err, pgx.ErrNoRows) {
			return fault.New(fault.InvalidState, "booking %d changed while its seats were being assigned", id)
		}
		if err != nil {
			return fmt.Errorf("assign seats to booking %d: %w", id, err)
		}
		status, until := "SOLD", any(nil)
		if nb.Status == booking.Held {
			status, until = "HELD", nb.HoldExpiresAt
		}
		tag, err := tx.Exec(ctx, `WITH locked AS (
				SELECT seat_no FROM seat WHERE flight_id = $1 AND seat_no = ANY($2) ORDER BY seat_no FOR UPDATE)
			UPDATE seat s SET status = $5, booking_id = $4, held_until = $6
			FROM locked l
			WHERE s.flight_id = $1 AND s.seat_no = l.seat_no AND s.fare_class = $3
			  AND (s.status = 'AVAILABLE' OR (s.status = 'HELD' AND s.held_until <= $7))`,
			nb.FlightID, r.Seats, nb.FareClass, nb.ID, status, until, now)
		if err != nil {
			return fmt.Errorf("assign seats to booking %d: %w", id, err)
		}
		if int(tag.RowsAffected()) != len(r.Seats) {
			return whySeatsUnavailable(ctx, tx, r)
		}
		if !slices.Equal(nb.Seats, r.Seats) {
			return fmt.Errorf("assign seats to booking %d: stored %v, not %v", id, nb.Seats, r.Seats)
		}
		out = nb
		// Consumers learn the seats: tickets already issued to a confirmed
		// booking get their seat numbers, check-in its seat list.
		return outbox.Write(ctx, tx, outbox.Event{BookingID: nb.ID, Type: outbox.BookingSeated, Data: nb.View(), Time: now})
	})
	if err == nil {
		s.seatMaps.Forget(fmt.Sprint(out.FlightID))
	}
	return out, err
}
