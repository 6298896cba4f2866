package web_test

import (
	"fmt"
	"testing"

	"berth.dev/berth/internal/auth"
)

// noNull is true when no text on the page is "null" or "undefined" (what
// a null node handed to append or replaceChildren turns into).
const noNull = `(() => {
  const w = document.createTreeWalker(document.getElementById('main'), NodeFilter.SHOW_TEXT);
  for (let n = w.nextNode(); n; n = w.nextNode()) if (/^\s*(null|undefined)\s*$/.test(n.data)) return false;
  return true;
})()`

// A booking page that is not HELD has no countdown: nothing shows the
// text "null" in its place.
func TestBrowserBookingPageShowsNoNull(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	bid := e.srv.Customer(4001).HoldQuantity(t, id, "ECONOMY", 1).BookingID
	e.srv.Customer(4001).Cancel(t, bid)

	tb := e.tab("customer", auth.Customer, 4001)
	tb.open(fmt.Sprintf("/app/bookings/%d", bid), "[data-booking-status]")
	tb.waitStatus("CANCELLED")
	tb.waitVisible(`[data-event="booking.cancelled"]`)
	if !eval[bool](tb, noNull) {
		t.Errorf("the cancelled booking's page shows %q", eval[string](tb, `document.getElementById('main').textContent`))
	}
}
