package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/auth"
)

// A hold extended once from its page (then the page offers no second
// try, and the API refuses one with invalid_state); a customer who finds the class sold out joins its line
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
	// Extended once, the hold offers no second try, and says why.
	if eval[bool](holder, `!!document.querySelector('[data-action="extend"]')`) {
		t.Error("after its extension the hold still offers More time")
	}
	if got := holder.text(`[data-extended]`); !strings.Contains(got, "only once") {
		t.Errorf("after its extension the page says %q, want that a hold is extended only once", got)
	}
	if _, p := e.srv.Customer(1001).TryExtend(t, bid); !p.Is(409, "invalid_state") {
		t.Errorf("second extension: %v, want 409 invalid_state", p)
	}

	fan := e.tab("fan", auth.Customer, 1003)
	fan.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"]`)
	// The class is sold out: the page offers its line instead of a Hold.
	fan.click(`input[name="fare"][value="ECONOMY"]`)
	fan.waitVisible(`[data-action="join-waitlist"]`)
	fan.joinWaitlist()
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
