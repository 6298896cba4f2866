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

// Event types (API.md, "Events").
const (
	BookingHeld      = "booking.held"
	BookingConfirmed = "booking.confirmed"
	BookingExpired   = "booking.expired"
	BookingCancelled = "booking.cancelled"
	BookingOnTrip    = "booking.on_trip"
	BookingCompleted = "booking.completed"
	RefundRequested  = "refund.requested"
	RefundCompleted  = "refund.completed"
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
	_, err = tx.Exec(ctx,
		`INSERT INTO outbox (booking_id, type, payload, created_at) VALUES ($1, $2, $3, $4)`,
		e.BookingID, e.Type, payload, e.Time)
	if err != nil {
		return fmt.Errorf("write %s event of booking %d: %w", e.Type, e.BookingID, err)
	}
	return nil
}
