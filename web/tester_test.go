package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

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
	tb, _ := e.rentalPage(6001, 6002, "30A-600.01", 72*time.Hour, false, `[data-action="pay"]`)
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
	tb, _ := e.rentalPage(6101, 6102, "30A-610.01", 72*time.Hour, true, `[data-action="cancel"]`)
	tb.askCancel()
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
func TestBrowserWaitingRoomHoldStaysDisabled(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.queuedFlight(6202)
	tb := e.tab("queued", auth.Customer, 6201)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="6F"]`)
	tb.click(`[data-seat="6F"]`)
	tb.click(`[data-action="hold"]`)
	tb.waitFor("the waiting room", `!!document.querySelector('[data-waiting-room]')`)
	_ = eval[bool](tb, countPosts("/bookings"))
	time.Sleep(3500 * time.Millisecond) // past a refresh of the map
	if !eval[bool](tb, `document.querySelector('[data-action="hold"]').disabled`) {
		t.Error("Hold is enabled again while queued")
	}
	_ = eval[bool](tb, `(document.querySelector('[data-action="hold"]').click(), true)`)
	time.Sleep(300 * time.Millisecond)
	if got := eval[int](tb, `window.__posts.length`); got != 0 {
		t.Errorf("a second press while queued sent %d more holds", got)
	}
}

// The focus stays on something after actions that redraw or disable the
// control pressed: cancelling, releasing a hold, More time, a Hold
// refused, the calendar's next month.
func TestBrowserFocusKept(t *testing.T) {
	t.Parallel()
	e := start(t)
	car := e.car(6301, "30A-630.01")
	from := e.srv.Clock.Now().Add(72 * time.Hour)
	paid := e.carBooking(6302, car, from, from.Add(24*time.Hour), true)
	held := e.carBooking(6302, car, from.Add(72*time.Hour), from.Add(96*time.Hour), false)
	held2 := e.carBooking(6302, car, from.Add(144*time.Hour), from.Add(168*time.Hour), false)
	tb := e.tab("customer", auth.Customer, 6302)
	notBody := func(what string) {
		t.Helper()
		tb.waitFor(what+": focus settled", `true`)
		time.Sleep(200 * time.Millisecond)
		if got := eval[string](tb, focused); got == "body" {
			t.Errorf("after %s the focus is on the body", what)
		}
	}
	for _, c := range []struct {
		id     int64
		status string
	}{{paid, "CANCELLED"}, {held, "CANCELLED"}} {
		tb.open(fmt.Sprintf("/app/bookings/%d", c.id), `[data-action="cancel"]`)
		tb.click(`[data-action="cancel"]`)
		tb.click(`[data-action="confirm-cancel"]`)
		tb.waitStatus(c.status)
		notBody(fmt.Sprintf("cancelling booking %d", c.id))
	}
	tb.open(fmt.Sprintf("/app/bookings/%d", held2), `[data-action="extend"]`)
	tb.click(`[data-action="extend"]`)
	tb.waitFor("the extension", `document.getElementById('announce').textContent.includes('now lasts')`)
	notBody("More time")

	// The calendar's next month.
	tb.open(fmt.Sprintf("/app/cars/%d", car), `table.calendar`)
	month := tb.text("#month")
	_ = eval[bool](tb, `([...document.querySelectorAll('button')].find((b) => b.textContent.includes('Next month')).focus(), true)`)
	tb.run(chromedp.KeyEvent(kb.Enter))
	tb.waitFor("the next month", fmt.Sprintf(`document.getElementById('month')?.textContent !== %q`, month))
	notBody("next month")
	if got := eval[string](tb, `document.activeElement.textContent`); !strings.Contains(got, "Next month") {
		t.Errorf("after next month the focus is on %q, want the Next month button", got)
	}

	// A Hold refused: seat_unavailable, then sold_out.
	fl := e.flight(3, 1, 0)
	buyer := e.tab("buyer", auth.Customer, 6303)
	buyer.open(fmt.Sprintf("/app/flights/%d", fl), `[data-seat="3A"]`)
	buyer.click(`[data-seat="3A"]`)
	e.srv.Customer(6304).HoldSeats(t, fl, "ECONOMY", "3A")
	buyer.click(`[data-action="hold"]`)
	buyer.waitFor("seat_unavailable", `document.querySelector('[role="alert"]')?.textContent.includes('seat_unavailable')`)
	time.Sleep(200 * time.Millisecond)
	if got := eval[string](buyer, focused); got == "body" {
		t.Error("after a Hold refused with seat_unavailable the focus is on the body")
	}
	// A page whose refresh has not come yet still offers the class.
	buyer.freezeFlightReads()
	e.srv.Customer(6304).HoldQuantity(t, fl, "ECONOMY", 5)
	buyer.click(`input[name="mode"][value="quantity"]`)
	buyer.click(`[data-action="hold"]`)
	buyer.waitFor("sold_out", `document.querySelector('[role="alert"]')?.textContent.includes('sold_out')`)
	time.Sleep(200 * time.Millisecond)
	if got := eval[string](buyer, focused); got == "body" {
		t.Error("after a Hold refused with sold_out the focus is on the body")
	}
}

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
func TestBrowserSoldOutAlertClears(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	// The buyer's page still shows seats (its refresh has not come) when
	// the class sells out: Hold is refused with sold_out.
	buyer := e.tab("buyer", auth.Customer, 6502)
	buyer.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"]`)
	buyer.click(`input[name="mode"][value="quantity"]`)
	buyer.click(`input[name="fare"][value="ECONOMY"]`)
	buyer.freezeFlightReads()
	e.srv.Customer(6501).HoldQuantity(t, id, "ECONOMY", 6)
	buyer.click(`[data-action="hold"]`)
	buyer.waitFor("sold_out", `document.querySelector('[role="alert"]')?.textContent.includes('sold_out')`)
	buyer.thawFlightReads()
	buyer.waitVisible(`[data-sold-out="ECONOMY"]`)
	e.srv.Admin().SetOverbookLimit(t, id, "ECONOMY", 2)
	buyer.waitFor("economy on sale again", `document.querySelector('[data-available="ECONOMY"]').textContent === '2 left'`)
	if eval[bool](buyer, `!!document.querySelector('[role="alert"]')`) {
		t.Errorf("the sold_out alert stays next to 2 left: %q", buyer.text(`[role="alert"]`))
	}
}

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
func TestBrowserDepartedSaysNotForSale(t *testing.T) {
	t.Parallel()
	e := start(t)
	now := e.srv.Clock.Now()
	e.srv.Clock.Set(now.Add(-48 * time.Hour))
	id := e.flight(1, 1, 0)
	e.srv.Clock.Set(now)
	tb := e.tab("late", auth.Customer, 6701)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"]`)
	if got := eval[string](tb, `document.querySelector('[data-seat="3A"]').dataset.status`); got != "AVAILABLE" {
		t.Errorf("3A data-status %q, want the API's AVAILABLE", got)
	}
	if got := eval[string](tb, `document.querySelector('[data-seat="3A"]').getAttribute('aria-label')`); strings.Contains(got, "available") {
		t.Errorf("3A is labelled %q on a departed flight", got)
	}
	if got := tb.text(`ul.legend`); strings.Contains(got, "available") {
		t.Errorf("the legend says %q on a departed flight", got)
	}
	if got := tb.text(`fieldset.fares`); strings.Contains(got, "left") {
		t.Errorf("the fares say %q on a departed flight", got)
	}
	time.Sleep(3500 * time.Millisecond) // a refresh
	if got := tb.text(`fieldset.fares`); strings.Contains(got, "left") {
		t.Errorf("after a refresh the fares say %q on a departed flight", got)
	}
	tb.check("flight (departed, not for sale)")

	// A page left open past the departure says the same once it turns
	// departed (its fares said "6 left" before).
	open := e.flight(1, 1, 0)
	tb.open(fmt.Sprintf("/app/flights/%d", open), `[data-seat="3A"]`)
	_ = eval[bool](tb, `(() => { const now = Date.now; Date.now = () => now() + 3 * 86400e3; return true })()`)
	tb.click(`[data-seat="3B"]`)
	tb.waitFor("the departed notice", `!!document.querySelector('[data-departed]')`)
	if got := tb.text(`fieldset.fares`); strings.Contains(got, "left") {
		t.Errorf("turned departed, the fares say %q", got)
	}
	if got := tb.text(`ul.legend`); strings.Contains(got, "available") {
		t.Errorf("turned departed, the legend says %q", got)
	}
	if got := eval[string](tb, `document.querySelector('[data-seat="3B"]').getAttribute('aria-label')`); strings.Contains(got, "available") {
		t.Errorf("turned departed, 3B is labelled %q", got)
	}
}
