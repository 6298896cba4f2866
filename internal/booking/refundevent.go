package booking

import (
	"bytes"
	"encoding/json"
	"time"
)

// RefundEventData is the data of a refund.* event (refund.requested,
// refund.completed): like every booking.* event's, the booking as its
// answers show it (View) at the event's transaction, with one member more,
// "refund", the refund the event is about. So data.amount is the
// booking's amount and data.refund.amount the refund's.
type RefundEventData struct {
	View
	Refund any `json:"refund"`
}

// NoBookingRefundEventData is the data of a refund.* event of money
// reported for a booking id that names no booking (reason
// unknown_booking): there is no booking to show, so the data is only the
// id the event's subject names, as a booking's own (bookingId), and the
// refund. A reader finds the refund where it finds every other one
// (data.refund) and the id where a booking has it, and no status or
// version: made-up zeros would pass for a booking that does not exist.
type NoBookingRefundEventData struct {
	BookingID int64 `json:"bookingId"`
	Refund    any   `json:"refund"`
}

// RefundEvent returns the data of a refund.* event of booking id about
// refund: b as it reads at now (AsOf, as GET /bookings/{id} answers at that
// moment) with the refund, or NoBookingRefundEventData when b is nil (no
// such booking).
func RefundEvent(b *Booking, id int64, refund any, now time.Time) any {
	if b == nil {
		return NoBookingRefundEventData{BookingID: id, Refund: refund}
	}
	return RefundEventData{View: b.AsOf(now).View(), Refund: refund}
}

// RefundOf returns the refund of a refund.* event's data: its "refund"
// member when that is an object, else the data itself. Events written
// before the data carried the booking (and by processes of that release
// while an upgrade rolls out) have the refund as their whole data; every
// reader of refund events goes through this so that it reads both.
func RefundOf(data json.RawMessage) (json.RawMessage, error) {
	var env struct {
		Refund json.RawMessage `json:"refund"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, err
	}
	if r := bytes.TrimSpace(env.Refund); len(r) > 0 && r[0] == '{' {
		return r, nil
	}
	return data, nil
}
