package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"berth.dev/berth/internal/auth"
)

// countPosts makes the tab note every POST whose URL contains part (in
// window.__posts) and hold it back for a second, so that it is still in
// flight when a second click comes.
func countPosts(part string) string {
	return fmt.Sprintf(`(() => { const real = window.fetch; window.__posts = [];
  window.fetch = (url, opts) => {
    if ((opts?.method || 'GET') !== 'POST' || !String(url).includes(%q)) return real(url, opts);
    window.__posts.push(opts.headers?.['Idempotency-Key'] || '');
    return new Promise((r) => setTimeout(r, 1000)).then(() => real(url, opts));
  };
  return true; })()`, part)
}

// A double click on Pay starts one charge: the second click, while the
// first is in flight, sends nothing.
func TestBrowserPayDoubleClick(t *testing.T) {
	t.Parallel()
	e := start(t)
	car := e.car(6001, "30A-600.01")
	from := e.srv.Clock.Now().Add(72 * time.Hour)
	id := e.carBooking(6002, car, from, from.Add(24*time.Hour), false)
	tb := e.tab("customer", auth.Customer, 6002)
	tb.open(fmt.Sprintf("/app/bookings/%d", id), `[data-action="pay"]`)
	_ = eval[bool](tb, countPosts("/payments"))
	_ = eval[bool](tb, `(() => { const b = document.querySelector('[data-action="pay"]'); b.click(); b.click(); return true })()`)
	if got := eval[int](tb, `window.__posts.length`); got != 1 {
		t.Errorf("a double click on Pay sent %d POST /payments, want 1", got)
	}
}

// A double click on "Yes, cancel" cancels once: no invalid_state alert
// over the cancelled booking; the focus stays off the body.
func TestBrowserCancelDoubleClick(t *testing.T) {
	t.Parallel()
	e := start(t)
	car := e.car(6101, "30A-610.01")
	from := e.srv.Clock.Now().Add(72 * time.Hour)
	id := e.carBooking(6102, car, from, from.Add(24*time.Hour), true)
	tb := e.tab("customer", auth.Customer, 6102)
	tb.open(fmt.Sprintf("/app/bookings/%d", id), `[data-action="cancel"]`)
	tb.click(`[data-action="cancel"]`)
	tb.waitVisible(`[data-action="confirm-cancel"]`)
	_ = eval[bool](tb, countPosts("/cancel"))
	_ = eval[bool](tb, `(() => { const b = document.querySelector('[data-action="confirm-cancel"]'); b.click(); b.click(); return true })()`)
	tb.waitStatus("CANCELLED")
	time.Sleep(1500 * time.Millisecond)
	if got := eval[int](tb, `window.__posts.length`); got != 1 {
		t.Errorf("a double click on Yes, cancel sent %d cancels, want 1", got)
	}
	if eval[bool](tb, `!!document.querySelector('[role="alert"]')`) {
		t.Errorf("an alert shows over the cancelled booking: %q", tb.text(`[role="alert"]`))
	}
}

// In the waiting room the map's refresh does not give Hold back: a second
// press cannot start another queue and more holds.
// The focus stays on something after actions that redraw or disable the
// control pressed: cancelling, releasing a hold, More time, a Hold
// refused, the calendar's next month.
// oneLine is true when every element sel's text is on one line.
func oneLine(sel string) string {
	return fmt.Sprintf(`[...document.querySelectorAll(%q)].filter((el) => el.checkVisibility()).map((el) => {
  const r = document.createRange(); r.selectNodeContents(el);
  const tops = new Set([...r.getClientRects()].filter((x) => x.width > 0).map((x) => Math.round(x.top)));
  return tops.size > 1 ? el.textContent : '';
}).filter(Boolean)`, sel)
}

// At 390 px the booking lists keep ids, statuses and actions whole.
func TestBrowserBookingTablesNarrow(t *testing.T) {
	t.Parallel()
	e := start(t)
	car := e.car(6401, "30A-640.01")
	from := e.srv.Clock.Now().Add(time.Hour)
	cancelled := e.carBooking(6402, car, from.Add(100*time.Hour), from.Add(124*time.Hour), true)
	e.srv.Customer(6402).Cancel(t, cancelled)
	e.carBooking(6402, car, from, from.Add(24*time.Hour), true)
	fl := e.flight(3, 1, 0)
	e.srv.Customer(6402).HoldQuantity(t, fl, "ECONOMY", 2)
	for _, c := range []struct {
		name, role, path string
		sub              int64
	}{{"customer", auth.Customer, "/app/bookings", 6402}, {"host", auth.Host, "/app/host", 6401}} {
		tb := e.tab(c.name, c.role, c.sub)
		tb.open(c.path, `[data-booking-status]`)
		tb.check(c.name + " bookings (narrow)")
		tb.run(chromedp.EmulateViewport(390, 844))
		broken := eval[[]string](tb, `new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(`+
			oneLine(`td .status, td > a[href^="/app/bookings/"], td button`)+`))))`)
		tb.run(chromedp.EmulateViewport(1100, 900))
		if len(broken) > 0 {
			t.Errorf("%s: at 390 px these break over lines: %q", c.name, broken)
		}
	}
}

// After the admin raises the limit, the buyer's stale sold_out alert goes
// once the fare box shows seats again.
// A refused overbook change puts the current limit back in the field and
// says why in the form's own words.
func TestBrowserOverbookRefused(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 2)
	e.srv.Customer(6601).HoldQuantity(t, id, "ECONOMY", 8)
	admin := e.tab("admin", auth.Admin, 1)
	row := fmt.Sprintf(`[data-flight="%d"] [data-fare="ECONOMY"]`, id)
	admin.open("/app/admin?from=SGN&to=HAN", row)
	admin.run(setValue(row+` input[type="number"]`, "0"))
	admin.click(row + ` [data-action="overbook"]`)
	admin.waitFor("the refusal", fmt.Sprintf(`document.querySelector('[data-flight="%d"] [role="alert"]')?.textContent.includes('invalid_state')`, id))
	got := admin.text(fmt.Sprintf(`[data-flight="%d"] [role="alert"]`, id))
	if strings.Contains(strings.ToLower(got), "booking") || !strings.Contains(got, "sold and held") {
		t.Errorf("the refusal says %q, want the limit's own words", got)
	}
	if v := eval[string](admin, `document.querySelector('`+row+` input[type="number"]').value`); v != "2" {
		t.Errorf("after the refusal the field says %s, want the current limit 2", v)
	}
	admin.check("admin (overbook refused)")
}

// A departed flight's map and fares do not say available or left.