package booking_test

import (
	"encoding/json"
	"testing"
	"time"

	"berth.dev/berth/internal/booking"
)

// A refund event's data is the booking (its View, as of the event) with
// the refund as one member more; with no booking, the id and the refund
// only. RefundOf reads the refund of both, and of an earlier release's
// event whose whole data was the refund.
func TestRefundEventDataAndRefundOf(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	refund := map[string]any{"bookingId": 42, "amount": 800, "currency": "VND", "reason": "cancelled_by_customer"}
	amount := int64(800)
	b := &booking.Booking{ID: 42, Kind: booking.KindFlight, Status: booking.Cancelled, CustomerID: 7, Amount: 1000,
		Currency: "VND", RefundAmount: &amount, RefundStatus: "REQUESTED", Version: 3, CreatedAt: now, UpdatedAt: now}
	// A hold whose time ran out reads EXPIRED, as GET answers at that moment.
	held := &booking.Booking{ID: 43, Kind: booking.KindFlight, Status: booking.Held, CustomerID: 7, Amount: 1000,
		Currency: "VND", HoldExpiresAt: now.Add(-time.Minute), Version: 1, CreatedAt: now, UpdatedAt: now}

	for _, c := range []struct {
		name         string
		data         any
		status       string
		version      float64
		bookingShown bool
	}{
		{"booking", booking.RefundEvent(b, 42, refund, now), "CANCELLED", 3, true},
		{"expired hold", booking.RefundEvent(held, 43, refund, now), "EXPIRED", 1, true},
		{"no booking", booking.RefundEvent(nil, 42, refund, now), "", 0, false},
	} {
		raw, err := json.Marshal(c.data)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		r, _ := m["refund"].(map[string]any)
		if r == nil || r["amount"] != float64(800) || m["bookingId"] == nil {
			t.Errorf("%s: %s, want bookingId and the refund as data.refund", c.name, raw)
		}
		if c.bookingShown && (m["status"] != c.status || m["version"] != c.version || m["amount"] != float64(1000)) {
			t.Errorf("%s: %s, want status %s, version %v, the booking's amount 1000", c.name, raw, c.status, c.version)
		}
		if !c.bookingShown && len(m) != 2 {
			t.Errorf("%s: %s, want only bookingId and refund", c.name, raw)
		}
		got, err := booking.RefundOf(raw)
		if err != nil {
			t.Fatal(err)
		}
		var gr map[string]any
		if err := json.Unmarshal(got, &gr); err != nil || gr["amount"] != float64(800) || gr["reason"] != "cancelled_by_customer" {
			t.Errorf("%s: RefundOf %s, want the refund", c.name, got)
		}
	}
	old := []byte(`{"bookingId": 42, "amount": 800, "currency": "VND", "reason": "late", "providerTxnId": "txn_1"}`)
	if got, err := booking.RefundOf(old); err != nil || string(got) != string(old) {
		t.Errorf("RefundOf of an earlier release's event: %s %v, want the data itself", got, err)
	}
	if _, err := booking.RefundOf([]byte(`not json`)); err == nil {
		t.Error("RefundOf of no JSON: no error")
	}
}
