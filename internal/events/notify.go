package events

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/outbox"
)

// Notification is one message to a customer about their booking.
type Notification struct {
	// ID is unique per event and channel, the same on every redelivery:
	// the receiver deduplicates by it.
	ID         string         `json:"id"`
	Channel    string         `json:"channel"` // sms, push or email
	CustomerID int64          `json:"customerId"`
	BookingID  int64          `json:"bookingId"`
	Event      string         `json:"event"` // booking.confirmed, …
	Status     booking.Status `json:"status"`
	Text       string         `json:"text"`
}

// Sender delivers notifications (an SMS gateway, a push service, a mail
// relay, or a webhook in front of them).
type Sender interface {
	Send(ctx context.Context, n Notification) error
}

// Channels are the channels every status change is notified on.
var Channels = []string{"sms", "push", "email"}

// Notifications tells customers about every status change of their
// bookings, on every channel, through Sender. Sending is outside the
// database, so it happens at least once; each notification carries an id
// derived from the event for the receiver to deduplicate.
type Notifications struct {
	Sender Sender
}

// NotificationsName is the notifications consumer's name.
const NotificationsName = "notifications"

// Name implements Consumer.
func (Notifications) Name() string { return NotificationsName }

// Wants takes the booking status changes and waitlist offers.
func (Notifications) Wants(e Event) bool {
	return strings.HasPrefix(e.Type, "booking.") || e.Type == outbox.WaitlistOffered
}

// Handle implements Consumer.
func (n Notifications) Handle(ctx context.Context, _ pgx.Tx, e Event) error {
	var v booking.View
	if err := json.Unmarshal(e.Data, &v); err != nil {
		return fmt.Errorf("decode booking: %w", err)
	}
	text := fmt.Sprintf("Your booking %d is now %s.", v.BookingID, strings.ToLower(string(v.Status)))
	switch {
	case e.Type == outbox.WaitlistOffered && v.HoldExpiresAt != nil:
		text = fmt.Sprintf("Good news: %d seat(s) came free on your waitlist. Booking %d holds them for you until %s; pay before then.",
			v.Quantity, v.BookingID, v.HoldExpiresAt.Format(time.RFC3339))
	case e.Type == outbox.BookingExtended && v.HoldExpiresAt != nil:
		text = fmt.Sprintf("Your booking %d is held until %s.", v.BookingID, v.HoldExpiresAt.Format(time.RFC3339))
	case e.Type == outbox.BookingSeated:
		text = fmt.Sprintf("Your booking %d has its seats: %s.", v.BookingID, strings.Join(v.Seats, ", "))
	}
	for _, ch := range Channels {
		err := n.Sender.Send(ctx, Notification{ID: e.ID + ":" + ch, Channel: ch, CustomerID: v.CustomerID,
			BookingID: v.BookingID, Event: e.Type, Status: v.Status, Text: text})
		if err != nil {
			return fmt.Errorf("notify %s: %w", ch, err)
		}
	}
	return nil
}

// LogSender writes notifications to the log: the default when no webhook
// is configured.
type LogSender struct{ Log *slog.Logger }

// Send implements Sender.
func (s LogSender) Send(_ context.Context, n Notification) error {
	s.Log.Info("notification", "id", n.ID, "channel", n.Channel, "customer", n.CustomerID, "booking", n.BookingID, "text", n.Text)
	return nil
}

// WebhookSender posts each notification as JSON through a Hook.
type WebhookSender struct{ Hook *Hook }

// Send implements Sender.
func (s WebhookSender) Send(ctx context.Context, n Notification) error {
	body, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("encode notification %s: %w", n.ID, err)
	}
	return s.Hook.Post(ctx, n.ID, body)
}
