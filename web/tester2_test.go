package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/auth"
)

// The outside web tester's second round: each test shows one finding
// fixed.

// A hold is extended once: after "More time" the page says so instead of
// offering it again (a press would only be refused with invalid_state),
// and the booking says when (extendedAt, in the booking's zone), so a
// page opened later knows too.
func TestBrowserExtendedOnce(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	bid := e.srv.Customer(7001).HoldQuantity(t, id, "ECONOMY", 1).BookingID
	tb := e.tab("holder", auth.Customer, 7001)
	tb.open(fmt.Sprintf("/app/bookings/%d", bid), `[data-action="extend"]`)
	tb.click(`[data-action="extend"]`)
	tb.waitFor("the extension", `document.getElementById('announce').textContent.includes('now lasts')`)
	notOffered := func(when string) {
		t.Helper()
		if eval[bool](tb, `!!document.querySelector('[data-action="extend"]:not([disabled])')`) {
			t.Errorf("%s: More time is still offered", when)
		}
		if got := eval[string](tb, `document.querySelector('[data-extended]')?.textContent || ''`); !strings.Contains(got, "only once") {
			t.Errorf("%s: the page says %q, want that a hold is extended only once", when, got)
		}
	}
	notOffered("after More time")
	time.Sleep(200 * time.Millisecond)
	if got := eval[string](tb, `document.activeElement.dataset.extended !== undefined ? 'note' : document.activeElement.tagName`); got != "note" {
		t.Errorf("after More time the focus is on %q, want the note in its place", got)
	}
	tb.check("booking (extended)")
	tb.open(fmt.Sprintf("/app/bookings/%d", bid), `[data-booking-status="HELD"]`)
	notOffered("opened again")

	b := e.srv.Customer(7001).GetBooking(t, bid)
	if b.ExtendedAt == nil || !b.ExtendedAt.Equal(e.srv.Clock.Now()) || b.ExtendedAt.Location() != time.UTC {
		t.Errorf("extendedAt %v, want the extension's time %v in UTC (a flight booking's zone)", b.ExtendedAt, e.srv.Clock.Now())
	}
	// A car booking's extendedAt is in the offset its period was written in.
	car := e.car(7002, "30A-700.01")
	from := e.srv.Clock.Now().In(ict).Add(72 * time.Hour)
	held := e.carBooking(7001, car, from, from.Add(24*time.Hour), false)
	if b := e.srv.Customer(7001).GetBooking(t, held); b.ExtendedAt != nil {
		t.Errorf("a hold not extended has extendedAt %v", b.ExtendedAt)
	}
	if b := e.srv.Customer(7001).Extend(t, held); b.ExtendedAt == nil || b.ExtendedAt.Format(time.RFC3339) != e.srv.Clock.Now().In(ict).Format(time.RFC3339) {
		t.Errorf("the car hold's extendedAt %v, want %s", b.ExtendedAt, e.srv.Clock.Now().In(ict).Format(time.RFC3339))
	}
}
