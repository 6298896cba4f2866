package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/auth"
)

// A hold extended once from its page (the second try shows the API's
// invalid_state); a customer who finds the class sold out joins its line
// from the flight page, and when a seat comes back finds the offer under
// My bookings, held for them with its countdown.
func TestBrowserExtendAndWaitlist(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	b := e.srv.Customer(1001).HoldQuantity(t, id, "ECONOMY", 6)
	bid := b.BookingID
	if b.HoldExpiresAt == nil {
		t.Fatalf("hold without holdExpiresAt: %+v", b)
	}
	first := *b.HoldExpiresAt

	holder := e.tab("holder", auth.Customer, 1001)
	holder.open(fmt.Sprintf("/app/bookings/%d", bid), "[data-booking-status]")
	holder.waitStatus("HELD")
	holder.click(`[data-action="extend"]`)
	holder.waitFor("the later deadline", fmt.Sprintf(`document.querySelector('[data-hold-expires]')?.getAttribute('datetime') === %q`,
		first.Add(5*time.Minute).Format(time.RFC3339)))
	holder.click(`[data-action="extend"]`)
	holder.waitVisible(`[role="alert"]`)
	if got := holder.text(`[role="alert"]`); !strings.Contains(got, "invalid_state") {
		t.Errorf("second extension: alert %q, want invalid_state", got)
	}

	fan := e.tab("fan", auth.Customer, 1003)
	fan.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"]`)
	fan.click(`input[name="fare"][value="ECONOMY"]`)
	fan.click(`[data-seat="3A"]`)
	fan.waitFor("3A selected", `document.querySelector('[data-seat="3A"]').dataset.status === 'SELECTED'`)
	fan.click(`[data-action="hold"]`)
	fan.waitVisible(`[data-action="join-waitlist"]`)
	fan.click(`[data-action="join-waitlist"]`)
	fan.waitFor("the place in line", `document.querySelector('[data-waitlist-status]')?.dataset.waitlistStatus === 'WAITING'`)
	if eval[bool](fan, `!!document.querySelector('[role="alert"]')`) {
		t.Errorf("after joining the line, the page still shows the alert %q", fan.text(`[role="alert"]`))
	}
	fan.check("flight (joined the waitlist)")

	e.srv.Customer(1001).Cancel(t, bid)
	fan.open("/app/bookings", `[data-action="offer"]`)
	fan.check("my bookings (an offer)")
	fan.click(`[data-action="offer"]`)
	fan.waitStatus("HELD")
	fan.waitVisible(`.countdown`)
}
