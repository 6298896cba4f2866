package events

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/outbox"
)

// Tickets issues ticket numbers to confirmed flight bookings, one per seat
// (or per unit of a quantity booking), gives them their seats when a
// confirmed quantity booking is seated, and voids them when the booking is
// cancelled. The ticket table's UNIQUE (booking_id, unit) makes a second
// issue impossible even without the processed-event record.
type Tickets struct {
	Clock clock.Clock
}

// TicketsName is the tickets consumer's name.
const TicketsName = "tickets"

// Name implements Consumer.
func (Tickets) Name() string { return TicketsName }

// Wants takes every booking event: it follows each flight booking's
// version, to recognise an older event arriving after a newer one.
func (Tickets) Wants(e Event) bool { return strings.HasPrefix(e.Type, "booking.") }

// Handle implements Consumer.
func (t Tickets) Handle(ctx context.Context, tx pgx.Tx, e Event) error {
	var v booking.View
	if err := json.Unmarshal(e.Data, &v); err != nil {
		return fmt.Errorf("decode booking: %w", err)
	}
	if v.Kind != booking.KindFlight {
		return nil
	}
	// Only a newer version of the booking than any seen before acts.
	tag, err := tx.Exec(ctx, `INSERT INTO ticket_booking (booking_id, version) VALUES ($1, $2)
		ON CONFLICT (booking_id) DO UPDATE SET version = EXCLUDED.version
		WHERE ticket_booking.version < EXCLUDED.version`, v.BookingID, v.Version)
	if err != nil {
		return fmt.Errorf("track booking %d version: %w", v.BookingID, err)
	}
	if tag.RowsAffected() == 0 {
		return nil
	}
	now := t.Clock.Now()
	switch {
	case v.Status == booking.Confirmed && (e.Type == outbox.BookingConfirmed || e.Type == outbox.BookingSeated):
		seats := v.Seats
		if seats == nil {
			seats = []string{}
		}
		// IATA-shaped numbers: a 3-digit carrier prefix and a 10-digit serial.
		// A ticket issued before its booking had seats (a quantity booking
		// confirmed, then seated) gets its seat number; one never changes seat.
		_, err := tx.Exec(ctx, `INSERT INTO ticket AS t (number, booking_id, unit, seat_no, event_id, issued_at)
			SELECT '999' || lpad(nextval('ticket_serial_seq')::text, 10, '0'), $1, u, ($2::text[])[u], $4, $5
			FROM generate_series(1, $3::int) AS u
			ON CONFLICT (booking_id, unit) DO UPDATE SET seat_no = EXCLUDED.seat_no
			WHERE t.seat_no IS NULL AND EXCLUDED.seat_no IS NOT NULL`, v.BookingID, seats, v.Quantity, e.ID, now)
		if err != nil {
			return fmt.Errorf("issue tickets of booking %d: %w", v.BookingID, err)
		}
	case !v.Status.Live():
		_, err := tx.Exec(ctx, `UPDATE ticket SET status = 'VOID', voided_at = $2 WHERE booking_id = $1 AND status = 'ISSUED'`,
			v.BookingID, now)
		if err != nil {
			return fmt.Errorf("void tickets of booking %d: %w", v.BookingID, err)
		}
	}
	return nil
}

// HandleBatch implements BatchHandler: the events of HELD flight bookings
// (booking.held, booking.extended: most of a busy day's events) only move
// the booking's version, so they take one statement for the whole batch;
// the others go through Handle, in order. A booking is HELD only before it
// is anything else, so its HELD events are older than any other event of
// it in the batch, and recording their versions first changes nothing
// that Handle decides.
func (t Tickets) HandleBatch(ctx context.Context, tx pgx.Tx, evs []Event) error {
	held := map[int64]int{} // booking → newest HELD version in evs
	var rest []Event
	for _, e := range evs {
		var v booking.View
		if err := json.Unmarshal(e.Data, &v); err != nil {
			return fmt.Errorf("decode booking: %w", err)
		}
		switch {
		case v.Kind != booking.KindFlight:
		case v.Status == booking.Held:
			held[v.BookingID] = max(held[v.BookingID], v.Version)
		default:
			rest = append(rest, e)
		}
	}
	if len(held) > 0 {
		ids := slices.Sorted(maps.Keys(held))
		versions := make([]int32, len(ids))
		for i, id := range ids {
			versions[i] = int32(held[id])
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ticket_booking (booking_id, version)
			SELECT * FROM unnest($1::bigint[], $2::int[])
			ON CONFLICT (booking_id) DO UPDATE SET version = EXCLUDED.version
			WHERE ticket_booking.version < EXCLUDED.version`, ids, versions); err != nil {
			return fmt.Errorf("track %d held bookings' versions: %w", len(ids), err)
		}
	}
	for _, e := range rest {
		if err := t.Handle(ctx, tx, e); err != nil {
			return err
		}
	}
	return nil
}

// Ticket is an issued (or voided) ticket.
type Ticket struct {
	Number    string
	BookingID int64
	Unit      int
	SeatNo    string
	Status    string
}

// TicketsOf returns booking id's tickets in unit order.
func TicketsOf(ctx context.Context, db outbox.Querier, id int64) ([]Ticket, error) {
	rows, err := db.Query(ctx, `SELECT number, booking_id, unit, coalesce(seat_no, ''), status FROM ticket
		WHERE booking_id = $1 ORDER BY unit`, id)
	if err != nil {
		return nil, fmt.Errorf("tickets of booking %d: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Ticket])
	if err != nil {
		return nil, fmt.Errorf("tickets of booking %d: %w", id, err)
	}
	return out, nil
}
