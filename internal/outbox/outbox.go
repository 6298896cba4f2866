// Package outbox records booking events in the same transaction as the state
// change they describe, so that an event exists if and only if the change
// committed. Publishing them is the relay's job.
package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Event types (docs/api.md, "Events").
const (
	BookingHeld      = "booking.held"
	BookingConfirmed = "booking.confirmed"
	BookingExpired   = "booking.expired"
	BookingCancelled = "booking.cancelled"
	BookingOnTrip    = "booking.on_trip"
	BookingCompleted = "booking.completed"
	BookingExtended  = "booking.extended"
	// BookingSeated: a quantity booking was given its seats (it keeps its
	// status).
	BookingSeated   = "booking.seats_assigned"
	WaitlistOffered = "waitlist.offered"
	RefundRequested = "refund.requested"
	RefundCompleted = "refund.completed"
)

// Event is one change to publish. Data is marshalled to JSON as the
// CloudEvents data member.
type Event struct {
	BookingID int64
	Type      string
	Data      any
	Time      time.Time
}

// Write inserts e into the outbox within tx. Callers must have locked (or
// just inserted) the booking row, which is what orders one booking's events.
func Write(ctx context.Context, tx pgx.Tx, e Event) error {
	payload, err := json.Marshal(e.Data)
	if err != nil {
		return fmt.Errorf("marshal %s event of booking %d: %w", e.Type, e.BookingID, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO outbox (booking_id, type, payload, created_at) VALUES ($1, $2, $3, $4)`,
		e.BookingID, e.Type, payload, e.Time); err != nil {
		return fmt.Errorf("write %s event of booking %d: %w", e.Type, e.BookingID, err)
	}
	return nil
}

// Recorded is an event as the outbox keeps it.
type Recorded struct {
	ID   string          `json:"id"`
	Type string          `json:"type"`
	Time time.Time       `json:"time"`
	Data json.RawMessage `json:"data"`
}

// MaxHistory is the most events History returns for one booking.
const MaxHistory = 200

// History returns the events of booking id that the outbox still keeps
// (published ones are deleted after the retention period), oldest first:
// the order they happened and were published in.
func History(ctx context.Context, db Querier, id int64) ([]Recorded, error) {
	rows, err := db.Query(ctx, `SELECT event_id::text, type, created_at, payload FROM outbox
		WHERE booking_id = $1 ORDER BY id LIMIT $2`, id, MaxHistory)
	if err != nil {
		return nil, fmt.Errorf("events of booking %d: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Recorded])
	if err != nil {
		return nil, fmt.Errorf("events of booking %d: %w", id, err)
	}
	return out, nil
}
