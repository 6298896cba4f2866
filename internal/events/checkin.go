package events

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/outbox"
)

// Checkin keeps the airline's check-in system in step with flight
// bookings: it reports a booking when it is confirmed, and again when a
// booking it reported is cancelled. With no Hook it only logs. What it
// reported is kept in checkin_booking, in the same transaction.
type Checkin struct {
	Hook *Hook // nil: log only
	Log  *slog.Logger
}

// CheckinName is the check-in consumer's name.
const CheckinName = "checkin"

// CheckinMessage is what the check-in system receives.
type CheckinMessage struct {
	ID      string       `json:"id"` // the event id: the receiver deduplicates by it
	Type    string       `json:"type"`
	Booking booking.View `json:"booking"`
}

// Name implements Consumer.
func (Checkin) Name() string { return CheckinName }

// Wants takes confirmations, cancellations and seat assignments (of a
// confirmed booking: the check-in system learns its seats).
func (Checkin) Wants(e Event) bool {
	return e.Type == outbox.BookingConfirmed || e.Type == outbox.BookingCancelled || e.Type == outbox.BookingSeated
}

// Handle implements Consumer.
func (c Checkin) Handle(ctx context.Context, tx pgx.Tx, e Event) error {
	var v booking.View
	if err := json.Unmarshal(e.Data, &v); err != nil {
		return fmt.Errorf("decode booking: %w", err)
	}
	if v.Kind != booking.KindFlight {
		return nil
	}
	// Only a newer version than the one reported acts, and a booking never
	// reported acts only once confirmed (nothing to withdraw otherwise).
	tag, err := tx.Exec(ctx, `INSERT INTO checkin_booking (booking_id, version, status)
		SELECT $1::bigint, $2::int, $3::text
		WHERE $4::bool OR EXISTS (SELECT 1 FROM checkin_booking WHERE booking_id = $1)
		ON CONFLICT (booking_id) DO UPDATE SET version = EXCLUDED.version, status = EXCLUDED.status
		WHERE checkin_booking.version < EXCLUDED.version`,
		v.BookingID, v.Version, v.Status, v.Status == booking.Confirmed)
	if err != nil {
		return fmt.Errorf("record check-in state of booking %d: %w", v.BookingID, err)
	}
	if tag.RowsAffected() == 0 {
		return nil
	}
	if c.Hook == nil {
		c.Log.Info("check-in sync", "booking", v.BookingID, "status", v.Status, "event", e.ID)
		return nil
	}
	body, err := json.Marshal(CheckinMessage{ID: e.ID, Type: e.Type, Booking: v})
	if err != nil {
		return fmt.Errorf("encode check-in message: %w", err)
	}
	return c.Hook.Post(ctx, e.ID, body)
}
