package web_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/auth"
)
// The outside web tester's third round: each test shows one finding
// fixed.

// settle waits two frames, so that layout and focus have caught up.
func settle(tb *tab) {
	tb.e.t.Helper()
	_ = eval[bool](tb, `new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`)
}

// brokenWords lists the words of the cells sel that are split over two
// lines.
func brokenWords(sel string) string {
	return fmt.Sprintf(`(() => { const bad = [];
  for (const td of document.querySelectorAll(%q)) {
    const w = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    for (let n; (n = w.nextNode());) for (const m of n.data.matchAll(/\S+/g)) {
      const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
      if (new Set([...r.getClientRects()].filter((x) => x.width > 0).map((x) => Math.round(x.top))).size > 1) bad.push(m[0]);
    } }
  return bad.join(' '); })()`, sel)
}

// At 375 px My bookings' What column wraps between words, never inside
// one ("Busin|ess"), and the page still does not scroll sideways.
func TestBrowserBookingWhatWraps(t *testing.T) {
	t.Parallel()
	e := start(t)
	dep := e.srv.Clock.Now().Add(72 * time.Hour).Truncate(time.Hour)
	id := e.srv.Admin().CreateFlight(t, apptest.Flight{Code: "BT303", DepartureAt: dep, Fares: []apptest.Fare{
		{Class: "BUSINESS", Price: 12_400_000, Capacity: 9},
		{Class: "PREMIUM", Price: 9_800_000, Capacity: 9},
	}}).ID
	c := e.srv.Customer(8301)
	for _, class := range []string{"BUSINESS", "PREMIUM"} {
		e.pay(8301, c.HoldQuantity(t, id, class, 9).BookingID)
	}
	from := e.srv.Clock.Now().In(ict).Add(96 * time.Hour)
	e.carBooking(8301, e.car(8302, "30A-830.01"), from, from.Add(48*time.Hour), false)
	tb := e.tab("customer", auth.Customer, 8301)
	tb.open("/app/bookings", `[data-booking-status]`)
	tb.waitFor("the car's model", `document.querySelector('main table')?.textContent.includes('Toyota Vios')`)
	for _, w := range []int64{375} {
		tb.run(chromedp.EmulateViewport(w, 812))
		settle(tb)
		if got := eval[string](tb, brokenWords(`main table tbody td:nth-child(2)`)); got != "" {
			t.Errorf("at %d px these words are split over two lines: %s", w, got)
		}
		if got := eval[int](tb, `document.documentElement.scrollWidth`); got > int(w) {
			t.Errorf("at %d px the page is %d px wide", w, got)
		}
	}
	tb.run(chromedp.EmulateViewport(1100, 900))
	tb.check("my bookings (what wraps)")
}
