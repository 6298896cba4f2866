package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paytest"
)

// The timeline shows a refund event's refund, not its booking's amount: a
// refund event's data is the booking with the refund as data.refund. A
// flight fare refunding 80 % cancelled with notice shows 800,000 VND
// refunded of 1,000,000; an event of an earlier release, whose data was
// the refund itself, still shows its own amount.
func TestBrowserTimelineRefundAmounts(t *testing.T) {
	t.Parallel()
	e := start(t)
	bid := e.paidEighty(7801)
	e.srv.Customer(7801).Cancel(t, bid)
	// As an earlier release wrote a refund.completed: the refund as the
	// whole data.
	if _, err := e.srv.App.Pool.Exec(t.Context(), `INSERT INTO outbox (booking_id, type, payload, created_at)
		VALUES ($1, 'refund.completed', jsonb_build_object('refundId', 999, 'bookingId', $1::bigint, 'amount', 123000,
			'currency', 'VND', 'providerTxnId', 'txn_old', 'gatewayRefundId', 'rf_old'), $2)`, bid, e.srv.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	tb := e.tab("customer", auth.Customer, 7801)
	tb.open(fmt.Sprintf("/app/bookings/%d", bid), `[data-event="refund.requested"]`)
	requested := tb.text(`[data-event="refund.requested"]`)
	if !strings.Contains(requested, "800,000") || strings.Contains(requested, "1,000,000") {
		t.Errorf("the refund request reads %q, want the refund, 800,000, not the booking's 1,000,000", requested)
	}
	old := eval[string](tb, `[...document.querySelectorAll('[data-event="refund.completed"]')].map((e) => e.textContent).join(' | ')`)
	if !strings.Contains(old, "123,000") {
		t.Errorf("the earlier release's refund.completed reads %q, want its amount, 123,000", old)
	}
}

// A booking paid twice and then cancelled shows its refund (80 %, what the
// quote said) and, apart, the second payment returned in full.
func TestBrowserRefundAndReturnedApart(t *testing.T) {
	t.Parallel()
	e := start(t)
	bid := e.paidEighty(7802)
	if r := paytest.Send(t, e.srv.URL, e.srv.Clock.Now(), payment.ChargeSucceeded, paytest.Foreign(t, e.srv.App.Pool, bid)); r.Status != 200 {
		t.Fatalf("second charge.succeeded: %d %s", r.Status, r.Body)
	}
	e.srv.Customer(7802).Cancel(t, bid)
	tb := e.tab("customer", auth.Customer, 7802)
	tb.open(fmt.Sprintf("/app/bookings/%d", bid), `[data-returned]`)
	if got := tb.text(`[data-refund]`); !strings.Contains(got, "800,000") {
		t.Errorf("the refund reads %q, want 800,000", got)
	}
	if got := tb.text(`[data-returned]`); !strings.Contains(got, "1,000,000") {
		t.Errorf("the money returned reads %q, want 1,000,000", got)
	}
	tb.check("booking (refund and money returned)")
}

// paidEighty is customer's confirmed booking of seat 3A on a new flight
// three days out whose one fare, 1,000,000 VND, refunds 80 %.
func (e *env) paidEighty(customer int64) int64 {
	e.t.Helper()
	dep := e.srv.Clock.Now().Add(72 * time.Hour).Truncate(time.Hour)
	eighty := 80
	fl := e.srv.Admin().CreateFlight(e.t, apptest.Flight{Code: "BT303", DepartureAt: dep, Fares: []apptest.Fare{
		{Class: "ECONOMY", Price: 1_000_000, Capacity: 6, Refundable: &eighty, Seats: []string{"3A", "3B", "3C", "3D", "3E", "3F"}},
	}}).ID
	bid := e.srv.Customer(customer).HoldSeats(e.t, fl, "ECONOMY", "3A").BookingID
	e.pay(customer, bid)
	return bid
}
