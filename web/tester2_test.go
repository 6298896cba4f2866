package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
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

// A quantity hold (or a waitlist offer) gets its seats on its booking
// page: the flight's map for its fare class, exactly quantity seats, one
// button; a seat taken meanwhile is refused with seat_unavailable, shown
// taken on the map.
func TestBrowserAssignSeats(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	pair := e.srv.Customer(7101).HoldQuantity(t, id, "ECONOMY", 2).BookingID
	one := e.srv.Customer(7101).HoldQuantity(t, id, "ECONOMY", 1).BookingID
	tb := e.tab("customer", auth.Customer, 7101)
	tb.open(fmt.Sprintf("/app/bookings/%d", pair), `[data-seat="3A"]`)
	tb.check("booking (choose seats)")
	assign := `document.querySelector('[data-action="assign-seats"]')`
	if !eval[bool](tb, assign+`.disabled`) {
		t.Error("with no seat chosen the button is enabled")
	}
	tb.click(`[data-seat="1A"]`) // business: not the booking's class
	if got := eval[string](tb, `document.querySelector('[data-seat="1A"]').dataset.status`); got != "AVAILABLE" {
		t.Errorf("a business seat for an economy booking turned %s", got)
	}
	tb.click(`[data-seat="3A"]`)
	if !eval[bool](tb, assign+`.disabled`) {
		t.Error("with 1 seat of 2 chosen the button is enabled")
	}
	tb.click(`[data-seat="3B"]`)
	tb.waitFor("3B selected", `document.querySelector('[data-seat="3B"]').dataset.status === 'SELECTED'`)
	tb.click(`[data-seat="3C"]`) // a third is one too many
	if got := eval[string](tb, `document.querySelector('[data-seat="3C"]').dataset.status`); got != "AVAILABLE" {
		t.Errorf("a third seat for 2 turned %s", got)
	}
	tb.click(`[data-action="assign-seats"]`)
	tb.waitFor("the seats assigned", `document.querySelector('.kv')?.textContent.includes('3A, 3B')`)
	if eval[bool](tb, `!!document.querySelector('[data-action="assign-seats"]')`) {
		t.Error("the seats are assigned, and the page still offers to assign some")
	}
	if got := e.srv.Customer(7101).GetBooking(t, pair).Seats; strings.Join(got, ",") != "3A,3B" {
		t.Errorf("the booking's seats are %v, want [3A 3B]", got)
	}

	// Someone takes the seat chosen before it is assigned.
	tb.open(fmt.Sprintf("/app/bookings/%d", one), `[data-seat="3C"]`)
	tb.click(`[data-seat="3C"]`)
	e.srv.Customer(7102).HoldSeats(t, id, "ECONOMY", "3C")
	tb.click(`[data-action="assign-seats"]`)
	tb.waitFor("seat_unavailable", `document.querySelector('[role="alert"]')?.textContent.includes('seat_unavailable')`)
	tb.waitFor("3C shown HELD", `document.querySelector('[data-seat="3C"]').dataset.status === 'HELD'`)
	tb.check("booking (seat taken)")
}

// A customer's booking page follows changes made elsewhere while the
// booking may still change, not only while HELD: the host's hand-over
// (CONFIRMED → ON_TRIP) shows within the refresh, without a reload and
// without the focus dropping to the body; a cancellation by the host
// shows at once when the tab is shown again.
func TestBrowserBookingPageFollows(t *testing.T) {
	t.Parallel()
	e := start(t)
	tb, id := e.rentalPage(7201, 7202, "30A-720.01", time.Hour, true, `[data-action="cancel"]`)
	tb.run(markPage())
	_ = eval[bool](tb, `(document.querySelector('[data-action="cancel"]').focus(), true)`)
	if r := apptest.Do(t, e.srv.URL, apptest.Request{Method: "POST", Path: fmt.Sprintf("/bookings/%d/pickup", id), Token: e.srv.Token(auth.Host, 7201)}); r.Status != 200 {
		t.Fatalf("pickup: %d %s", r.Status, r.Code())
	}
	tb.waitStatus("ON_TRIP")
	if !eval[bool](tb, `window.__berthMark === true`) {
		t.Error("the page was reloaded")
	}
	time.Sleep(200 * time.Millisecond)
	if got := eval[string](tb, focused); got == "body" {
		t.Error("after the refresh the focus is on the body")
	}

	// Another booking, open, cancelled by the host: the tab, shown again,
	// asks at once (not at the next 12 s refresh).
	from := e.srv.Clock.Now().Add(96 * time.Hour)
	other := e.carBooking(7202, e.car(7201, "30A-720.02"), from, from.Add(24*time.Hour), true)
	tb.open(fmt.Sprintf("/app/bookings/%d", other), `[data-action="cancel"]`)
	e.srv.Host(7201).Cancel(t, other)
	_ = eval[bool](tb, `(document.dispatchEvent(new Event('visibilitychange')), true)`)
	deadline := time.Now().Add(5 * time.Second)
	for eval[string](tb, `document.querySelector('[data-booking-status]').dataset.bookingStatus`) != "CANCELLED" {
		if time.Now().After(deadline) {
			t.Fatal("5 s after the tab was shown again, the host's cancellation is not on the page")
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.check("booking (cancelled by the host)")
}

// The cancel question is modal: a <dialog> opened with showModal, the page
// behind it out of reach of the mouse and the keyboard until it is
// answered; Escape closes it with the focus back on the button that
// opened it.
func TestBrowserCancelQuestionModal(t *testing.T) {
	t.Parallel()
	e := start(t)
	tb, _ := e.rentalPage(7301, 7302, "30A-730.01", 96*time.Hour, true, `[data-action="cancel"]`)
	tb.askCancel()
	if !eval[bool](tb, `!!document.querySelector('[data-refund-quote]')?.matches('dialog:modal')`) {
		t.Error("the cancel question is not a modal dialog")
	}
	// The page behind: the mouse cannot reach the Cancel booking button.
	if eval[bool](tb, `(() => { const r = document.querySelector('[data-action="cancel"]').getBoundingClientRect();
  return document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2)?.dataset?.action === 'cancel'; })()`) {
		t.Error("the Cancel booking button behind the question can still be clicked")
	}
	// Nor the keyboard: Tab stays in the question.
	for i := range 4 {
		tb.run(keys("\t"))
		if !eval[bool](tb, `!!document.activeElement.closest('dialog')`) {
			t.Errorf("Tab %d left the question for %q", i+1, eval[string](tb, focused))
			break
		}
	}
	tb.check("booking (modal cancel question)")
	tb.escapeCancel()
	if got := eval[string](tb, focused); got != "cancel" {
		t.Errorf("after Escape the focus is on %q, want the Cancel booking button", got)
	}
}

// A hand-over refused for being outside the pick-up window says the
// window in the booking's own zone (Hanoi's +07:00, as its times are
// written), not in UTC.
func TestBrowserHandoverWindowInZone(t *testing.T) {
	t.Parallel()
	e := start(t)
	from := e.srv.Clock.Now().In(ict).Add(48 * time.Hour)
	id := e.carBooking(7402, e.car(7401, "30A-740.01"), from, from.Add(24*time.Hour), true)
	host := e.tab("host", auth.Host, 7401)
	host.open(fmt.Sprintf("/app/bookings/%d", id), `[data-action="pickup"]`)
	host.click(`[data-action="pickup"]`)
	host.waitFor("the refusal", `document.querySelector('[role="alert"]')?.textContent.includes('invalid_state')`)
	// The window is said as the page says times (in the booking's zone,
	// GMT+7), each in a <time> keeping the exact value, under a lead that
	// says what is wrong.
	got := host.text(`[role="alert"]`)
	for _, at := range []time.Time{from.Add(-2 * time.Hour), from.Add(24 * time.Hour)} {
		if want := at.Format("2 Jan 2006, 15:04") + " GMT+7"; !strings.Contains(got, want) {
			t.Errorf("the refusal says %q, want the window in the booking's zone (%s)", got, want)
		}
		if !eval[bool](host, fmt.Sprintf(`!!document.querySelector('[role="alert"] time[datetime=%q]')`, at.Format(time.RFC3339))) {
			t.Errorf("the refusal has no <time datetime=%q>", at.Format(time.RFC3339))
		}
	}
	if !strings.Contains(got, "Not yet: the car can be handed over only in its pick-up window") || strings.Contains(got, "T"+from.Format("15:04")) {
		t.Errorf("the refusal says %q, want the lead \"Not yet: …\" and no RFC 3339 times", got)
	}
	host.check("booking (hand-over refused)")
}

// The refund question names the rule's tier that gives the refund: a car
// cancelled 48 h before pick-up gets 50 % for 24–72 h of notice; a flight
// fare refunding 80 % up to 24 h gets 80 % for at least 24 h.
func TestBrowserRefundRuleInWords(t *testing.T) {
	t.Parallel()
	e := start(t)
	tb, _ := e.rentalPage(7501, 7502, "30A-750.01", 48*time.Hour, true, `[data-action="cancel"]`)
	tb.askCancel()
	if got := tb.text(`[data-refund-quote] p`); !strings.Contains(got, "50 % — cancelled 24–72 h before pick-up") {
		t.Errorf("the question says %q, want the tier: 50 %% — cancelled 24–72 h before pick-up", got)
	}
	tb.check("booking (refund rule in words)")

	dep := e.srv.Clock.Now().Add(72 * time.Hour).Truncate(time.Hour)
	eighty := 80
	fl := e.srv.Admin().CreateFlight(t, apptest.Flight{Code: "BT202", DepartureAt: dep, Fares: []apptest.Fare{
		{Class: "ECONOMY", Price: 1_000_000, Capacity: 6, Refundable: &eighty, Seats: []string{"3A", "3B", "3C", "3D", "3E", "3F"}},
	}}).ID
	bid := e.srv.Customer(7502).HoldSeats(t, fl, "ECONOMY", "3A").BookingID
	e.pay(7502, bid)
	tb.open(fmt.Sprintf("/app/bookings/%d", bid), `[data-action="cancel"]`)
	tb.askCancel()
	if got := tb.text(`[data-refund-quote] p`); !strings.Contains(got, "80 % — cancelled at least 24 h before departure") {
		t.Errorf("the question says %q, want the tier: 80 %% — cancelled at least 24 h before departure", got)
	}
}

// The number of seats is checked in the page: a whole number from 1 to 9.
// 2.5 or 12 keep Hold disabled with the reason next to the field, tied to
// it (aria-describedby) and the field marked invalid; 3 lets Hold go.
func TestBrowserQuantityField(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 2, 0)
	tb := e.tab("customer", auth.Customer, 7601)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"]`)
	tb.click(`input[name="mode"][value="quantity"]`)
	field := `input[type="number"][aria-describedby]`
	reason := `(() => { const f = document.querySelector('` + field + `'); return f.getAttribute('aria-describedby').split(' ').map((i) => document.getElementById(i)?.textContent || '').join(' '); })()`
	for _, c := range []struct{ value, want string }{{"2.5", "whole"}, {"12", "At most 9"}, {"0", "At least 1"}} {
		tb.run(setValue(field, c.value))
		_ = eval[bool](tb, `(document.querySelector('`+field+`').dispatchEvent(new Event('input', {bubbles: true})), true)`)
		if !eval[bool](tb, `document.querySelector('[data-action="hold"]').disabled`) {
			t.Errorf("%s seats: Hold is enabled", c.value)
		}
		if got := eval[string](tb, reason); !strings.Contains(got, c.want) {
			t.Errorf("%s seats: the field is described as %q, want %q", c.value, got, c.want)
		}
		if got := eval[string](tb, `document.querySelector('`+field+`').getAttribute('aria-invalid') || ''`); got != "true" {
			t.Errorf("%s seats: aria-invalid=%q, want true", c.value, got)
		}
	}
	tb.check("flight (quantity refused)")
	tb.run(setValue(field, "3"))
	_ = eval[bool](tb, `(document.querySelector('`+field+`').dispatchEvent(new Event('input', {bubbles: true})), true)`)
	if eval[bool](tb, `document.querySelector('[data-action="hold"]').disabled`) {
		t.Error("3 seats: Hold is disabled")
	}
	if eval[bool](tb, `document.querySelector('`+field+`').hasAttribute('aria-invalid')`) {
		t.Error("3 seats: the field is still marked invalid")
	}
	tb.click(`[data-action="hold"]`)
	tb.waitStatus("HELD")
}

// The seat numbers of the fare classes not being chosen stay legible: at
// least 4.5:1 against their seat's fill as shown (opacity included, over
// the page), while the seats still look unlike the chosen class's.
func TestBrowserOtherClassSeatsLegible(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	tb := e.tab("customer", auth.Customer, 7701)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"]`)
	// shown is a colour as it shows: rgb blended with the page's background
	// by the seat's opacity (and the rect's fill-opacity for its fill).
	contrast := func(seat string) (float64, bool) {
		res := eval[[]float64](tb, fmt.Sprintf(`(() => {
  const g = document.querySelector('[data-seat="%s"]');
  const rgb = (c) => c.match(/[\d.]+/g).slice(0, 3).map(Number);
  const bg = rgb(getComputedStyle(document.documentElement).backgroundColor);
  let o = 1; for (let n = g; n && n.nodeType === 1; n = n.parentNode) o *= Number(getComputedStyle(n).opacity);
  const rs = getComputedStyle(g.querySelector('rect')), ts = getComputedStyle(g.querySelector('text'));
  const mix = (c, a, under) => c.map((v, i) => a * v + (1 - a) * under[i]);
  const rect = mix(mix(rgb(rs.fill), Number(rs.fillOpacity), bg), o, bg);
  const text = mix(rgb(ts.fill), o, bg);
  const lum = (c) => { const [r, gg, b] = c.map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }); return 0.2126 * r + 0.7152 * gg + 0.0722 * b; };
  const [x, y] = [lum(rect), lum(text)].sort((p, q) => q - p);
  return [(x + 0.05) / (y + 0.05), g.classList.contains('other-class') ? 1 : 0, lum(rect)];
})()`, seat))
		return res[0], res[1] == 1
	}
	tb.click(`input[name="fare"][value="BUSINESS"]`)
	if c, other := contrast("3A"); !other || c < 4.5 {
		t.Errorf("economy 3A while business is chosen: other class %v, text contrast %.2f:1, want at least 4.5:1", other, c)
	}
	tb.click(`input[name="fare"][value="ECONOMY"]`)
	if c, other := contrast("1A"); !other || c < 4.5 {
		t.Errorf("business 1A while economy is chosen: other class %v, text contrast %.2f:1, want at least 4.5:1", other, c)
	}
	// Still unlike the chosen class's seats: their fills differ clearly.
	fill := func(seat string) string {
		return eval[string](tb, fmt.Sprintf(`(() => { const r = getComputedStyle(document.querySelector('[data-seat="%s"] rect')); return r.fill + ' ' + r.fillOpacity + ' ' + getComputedStyle(document.querySelector('[data-seat="%s"]')).opacity; })()`, seat, seat))
	}
	if fill("1A") == fill("3A") {
		t.Errorf("the other class's seat 1A shows as %q, the chosen class's 3A as %q", fill("1A"), fill("3A"))
	}
	tb.check("flight (other classes legible)")
}

// "Pay before" names the place whose time it is: the departure airport's
// city for a flight, the car's city for a car, not only an offset.
func TestBrowserPayBeforeNamesTheCity(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	bid := e.srv.Customer(7801).HoldQuantity(t, id, "ECONOMY", 1).BookingID
	tb := e.tab("customer", auth.Customer, 7801)
	tb.open(fmt.Sprintf("/app/bookings/%d", bid), `[data-hold-expires]`)
	if got := eval[string](tb, `document.querySelector('[data-hold-expires]').parentElement.textContent`); !strings.Contains(got, "Ho Chi Minh City time") {
		t.Errorf("a flight from SGN: %q, want the deadline in Ho Chi Minh City time", got)
	}
	from := e.srv.Clock.Now().In(ict).Add(72 * time.Hour)
	car := e.carBooking(7801, e.car(7802, "30A-780.01"), from, from.Add(24*time.Hour), false)
	tb.open(fmt.Sprintf("/app/bookings/%d", car), `[data-hold-expires]`)
	if got := eval[string](tb, `document.querySelector('[data-hold-expires]').parentElement.textContent`); !strings.Contains(got, "Hanoi time") {
		t.Errorf("a car in Hanoi: %q, want the deadline in Hanoi time", got)
	}
	tb.check("booking (pay before, named)")
}

// Before any audit has run, the admin page says so, and asking for the
// last audit is not an HTTP error (it logged a 404 in the console): 200.
func TestBrowserNoAuditYet(t *testing.T) {
	t.Parallel()
	e := start(t)
	admin := e.tab("admin", auth.Admin, 1)
	admin.open("/app/admin", `[data-action="audit"]`)
	if got := eval[string](admin, `document.querySelector('[data-action="audit"]').parentElement.textContent`); !strings.Contains(got, "No audit has run yet") {
		t.Errorf("before any audit the page says %q, want No audit has run yet", got)
	}
	statuses := eval[[]float64](admin, `performance.getEntriesByType('resource').filter((r) => new URL(r.name).pathname === '/admin/audit').map((r) => r.responseStatus)`)
	if len(statuses) == 0 {
		t.Fatal("the page did not ask GET /admin/audit")
	}
	for _, s := range statuses {
		if s != 200 {
			t.Errorf("GET /admin/audit answered %v before any audit, want 200", s)
		}
	}
	admin.click(`[data-action="audit"]`)
	admin.waitVisible(`[data-audit-ok="true"]`)
	admin.check("admin (no audit, then one)")
}

// After "List the car" the page says what was listed, with the new car's
// number and a link to it, and the whole form starts again from its
// defaults (the price and deposit too, not only emptied).
func TestBrowserListCarResetsForm(t *testing.T) {
	t.Parallel()
	e := start(t)
	host := e.tab("host", auth.Host, 7901)
	host.open("/app/host", `form button[type="submit"]`)
	// The form's fields by their labels.
	const fields = `Object.fromEntries([...document.querySelectorAll('form label')].map((l) => [l.firstChild.textContent, l.querySelector('input, select').value]))`
	defaults := eval[map[string]string](host, fields)
	for label, v := range map[string]string{"Plate": "30A-790.01", "Model": "Kia Morning", "City": "DN", "Price a day": "650000", "Deposit": "3000000", "Turnaround": "3h"} {
		_ = eval[bool](host, fmt.Sprintf(`([...document.querySelectorAll('form label')].find((l) => l.firstChild.textContent === %q).querySelector('input, select').value = %q, true)`, label, v))
	}
	host.click(`form button[type="submit"]`)
	host.waitVisible(`form [role="status"]`)
	cars := e.srv.Host(7901).HostCars(t, "").Cars
	if len(cars) != 1 {
		t.Fatalf("the host has %d cars, want the one listed", len(cars))
	}
	id := fmt.Sprint(cars[0].ID)
	if got := host.text(`form [role="status"]`); !strings.Contains(got, "Kia Morning") || !strings.Contains(got, "car "+id) {
		t.Errorf("after listing the page says %q, want the model and car %s", got, id)
	}
	if !eval[bool](host, fmt.Sprintf(`!!document.querySelector('form [role="status"] a[href="/app/cars/%s"]')`, id)) {
		t.Errorf("no link to the new car %s", id)
	}
	after := eval[map[string]string](host, fields)
	for name, v := range defaults {
		if after[name] != v {
			t.Errorf("after listing %s is %q, want its default %q", name, after[name], v)
		}
	}
	if defaults["Price a day"] == "" || defaults["Deposit"] == "" || defaults["City"] != "HN" {
		t.Errorf("the form starts with %v, want a price and a deposit", defaults)
	}
	host.waitVisible(fmt.Sprintf(`tr[data-car=%q]`, id))
	host.check("host (car listed)")
}
