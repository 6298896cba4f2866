// Package events delivers booking events from the outbox to the consumers
// that act on them (tickets, notifications, refunds, check-in sync), at
// least once and in order per booking, and makes each consumer's effect
// happen once by remembering, in the same transaction as the effect, which
// events it has processed.
package events

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Event is a booking event as consumers receive it: the CloudEvents
// envelope's members, with the data still encoded.
type Event struct {
	ID        string    // the CloudEvents id: the outbox row's event_id
	Type      string    // booking.confirmed, refund.requested, … (outbox constants)
	BookingID int64     // the CloudEvents subject
	Time      time.Time // when the change committed (server clock)
	// Data is the booking as docs/api.md shows it after the change
	// (booking.View); a refund.* event's also has the refund as its
	// "refund" member (booking.RefundEventData, read with booking.RefundOf).
	Data json.RawMessage
}

// Consumer acts on events. Handle runs inside tx, the transaction that also
// records that this consumer processed e, so a database effect written
// through tx happens exactly once. An effect outside the database (an HTTP
// call) happens at least once: it must carry e.ID (or a key derived from
// it) so the receiver can deduplicate. Returning an error rolls tx back and
// the event is retried later with backoff.
type Consumer interface {
	// Name identifies the consumer in the processed-events record and in
	// metrics; it must never change once deployed.
	Name() string
	Handle(ctx context.Context, tx pgx.Tx, e Event) error
}
