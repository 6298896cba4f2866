package events

import (
	"context"
	"encoding/json"
	"errors"
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

// Wants takes confirmations and cancellations.
func (Checkin) Wants(e Event) bool {
	return e.Type == outbox.BookingConfirmed || e.Type == outbox.BookingCancelled
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
	var known string
	var version int
	err := tx.QueryRow(ctx, `SELECT status, version FROM checkin_booking WHERE booking_id = $1 FOR UPDATE`, v.BookingID).Scan(&known, &version)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if v.Status != booking.Confirmed {
			return nil // never reported, so nothing to withdraw
		}
	case err != nil:
		return fmt.Errorf("look up check-in state of booking %d: %w", v.BookingID, err)
	case version >= v.Version:
		return nil // an older event than one already reported
	}
	_, err = tx.Exec(ctx, `INSERT INTO checkin_booking (booking_id, version, status) VALUES ($1, $2, $3)
		ON CONFLICT (booking_id) DO UPDATE SET version = EXCLUDED.version, status = EXCLUDED.status`,
		v.BookingID, v.Version, v.Status)
	if err != nil {
		return fmt.Errorf("record check-in state of booking %d: %w", v.BookingID, err)
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
