package web_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

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

// A search finding more cars than a page holds shows the first page and a
// control that appends the next (after= the API's nextAfter); the control
// goes once the last page is in.
func TestBrowserCarSearchPages(t *testing.T) {
	t.Parallel()
	e := start(t)
	for i := range 23 {
		e.car(4101, fmt.Sprintf("30A-%03d.41", i))
	}
	day := e.srv.Clock.Now().In(ict).Truncate(24*time.Hour).AddDate(0, 0, 10)
	pickup := time.Date(day.Year(), day.Month(), day.Day(), 9, 0, 0, 0, ict)
	q := url.Values{"city": {"HN"}, "from": {wall(pickup)}, "to": {wall(pickup.AddDate(0, 0, 2))}}

	tb := e.tab("renter", auth.Customer, 4102)
	tb.open("/app/cars?"+q.Encode(), "li.card a")
	if n := eval[int](tb, `document.querySelectorAll('li.card').length`); n != 20 {
		t.Errorf("the first page shows %d cars, want 20", n)
	}
	if !eval[bool](tb, `!!document.querySelector('[data-action="more-cars"]')?.checkVisibility()`) {
		t.Fatal("no control shows the next page of cars")
	}
	tb.click(`[data-action="more-cars"]`)
	tb.waitFor("the next page appended", `document.querySelectorAll('li.card').length === 23`)
	tb.waitFor("the control gone", `!document.querySelector('[data-action="more-cars"]').checkVisibility()`)
	ids := eval[string](tb, `[...document.querySelectorAll('li.card')].map(c => c.dataset.car).join()`)
	if len(strings.Split(ids, ",")) != 23 || hasDup(strings.Split(ids, ",")) {
		t.Errorf("cars shown %s: want 23 different cars", ids)
	}
	tb.check("car search (two pages)")
}

func hasDup(s []string) bool {
	seen := map[string]bool{}
	for _, v := range s {
		if seen[v] {
			return true
		}
		seen[v] = true
	}
	return false
}
