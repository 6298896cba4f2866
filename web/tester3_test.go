package web_test

import (
	"fmt"
	"strings"
	"testing"

	"berth.dev/berth/internal/auth"
)

// The new-user tester's findings: each test shows one fixed.

// seatFocusJS focuses a seat and measures its focus indicator: whether
// focusing changes how the seat looks, and the best contrast of a stroke
// drawn around it (2 px or more, opaque, visible) against the seat's fill
// and against the page.
const seatFocusJS = `((no) => {
  const parse = (c) => { const m = c.match(/[\d.]+/g).map(Number); return { r: m[0], g: m[1], b: m[2], a: m.length > 3 ? m[3] : 1 }; };
  const lum = ({ r, g, b }) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }; return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const ratio = (a, b) => { const x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); };
  const over = (c, op, bg) => ({ r: c.r * op + bg.r * (1 - op), g: c.g * op + bg.g * (1 - op), b: c.b * op + bg.b * (1 - op) });
  let bg = parse(getComputedStyle(document.body).backgroundColor);
  if (bg.a === 0) bg = { r: 255, g: 255, b: 255 };
  const g = document.querySelector('[data-seat="' + no + '"]');
  const look = () => [...g.querySelectorAll('rect')].map((r) => { const s = getComputedStyle(r); return [s.visibility, s.stroke, s.strokeWidth, s.fill].join(' '); }).join('|');
  document.activeElement?.blur();
  const before = look();
  g.focus();
  const after = look();
  const cs = getComputedStyle(g.querySelector('rect'));
  const fill = over(parse(cs.fill), Number(cs.fillOpacity), bg);
  const layers = [...g.querySelectorAll('rect')].filter((r) => { const s = getComputedStyle(r);
    return s.visibility !== 'hidden' && s.display !== 'none' && s.stroke !== 'none' && parseFloat(s.strokeWidth) >= 2 && Number(s.strokeOpacity) === 1; })
    .map((r) => parse(getComputedStyle(r).stroke));
  return { status: g.dataset.status, focused: document.activeElement === g, changed: before !== after,
    seat: Math.max(0, ...layers.map((l) => ratio(l, fill))), page: Math.max(0, ...layers.map((l) => ratio(l, bg))) };
})`

// A focused seat is told apart from the same seat unfocused in every
// state, a chosen (yellow) seat included: its ring contrasts 3:1 or more
// with the seat and with the page.
func TestBrowserSeatFocusVisible(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	e.srv.Customer(8001).HoldSeats(t, id, "ECONOMY", "3B")
	sold := e.srv.Customer(8001).HoldSeats(t, id, "ECONOMY", "3C").BookingID
	e.pay(8001, sold)
	tb := e.tab("buyer", auth.Customer, 8002)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3C"][data-status="SOLD"]`)
	tb.click(`input[name="fare"][value="ECONOMY"]`)
	tb.click(`[data-seat="3A"]`)
	tb.waitFor("3A selected", `document.querySelector('[data-seat="3A"]').dataset.status === 'SELECTED'`)
	type measure struct {
		Status     string
		Focused    bool
		Changed    bool
		Seat, Page float64
	}
	for _, no := range []string{"3A", "3D", "3B", "3C", "1A"} {
		m := eval[measure](tb, seatFocusJS+fmt.Sprintf("(%q)", no))
		if !m.Focused {
			t.Errorf("seat %s (%s) cannot be focused", no, m.Status)
			continue
		}
		if !m.Changed {
			t.Errorf("seat %s (%s) looks the same focused and not", no, m.Status)
		}
		if m.Seat < 3 || m.Page < 3 {
			t.Errorf("seat %s (%s): its focus ring contrasts %.2f:1 with the seat and %.2f:1 with the page, want 3:1 or more", no, m.Status, m.Seat, m.Page)
		}
	}
}

// A sold-out class (its fare card says "Sold out": every unit taken by
// quantity holds) offers none of its seats: they stay AVAILABLE for the
// API's hook but cannot be chosen, its legend and labels say it is sold
// out, Hold waits, and the page offers the class's waitlist instead.
func TestBrowserSoldOutClassSeats(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	e.srv.Customer(8101).HoldQuantity(t, id, "BUSINESS", 9)
	e.srv.Customer(8101).HoldQuantity(t, id, "BUSINESS", 3)
	tb := e.tab("buyer", auth.Customer, 8102)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="1A"]`)
	if got := tb.text(`[data-available="BUSINESS"]`); got != "Sold out" {
		t.Fatalf("business fare card says %q, want Sold out", got)
	}
	seat := `document.querySelector('[data-seat="1A"]')`
	if got := eval[string](tb, seat+`.dataset.status`); got != "AVAILABLE" {
		t.Errorf("1A data-status %s, want the API's AVAILABLE", got)
	}
	if got := eval[string](tb, seat+`.getAttribute('aria-disabled')`); got != "true" {
		t.Errorf("1A aria-disabled %q, want true", got)
	}
	if got := eval[string](tb, seat+`.getAttribute('aria-label')`); !strings.Contains(got, "sold out") {
		t.Errorf("1A is labelled %q, want it to say sold out", got)
	}
	legend := tb.text(`[aria-label="Legend"]`)
	if strings.Contains(legend, "Business (available)") || !strings.Contains(legend, "Business (sold out") {
		t.Errorf("legend %q, want Business sold out, not available", legend)
	}
	tb.click(`[data-seat="1A"]`)
	if got := eval[string](tb, seat+`.dataset.status`); got != "AVAILABLE" {
		t.Errorf("a sold-out class's seat was chosen: %s", got)
	}
	if got := eval[int](tb, `document.querySelectorAll('[data-status="SELECTED"]').length`); got != 0 {
		t.Errorf("%d seats selected after clicking a sold-out class's seat", got)
	}
	// Economy still sells.
	tb.click(`[data-seat="3A"]`)
	tb.waitFor("3A selected", `document.querySelector('[data-seat="3A"]').dataset.status === 'SELECTED'`)
	// Choosing business offers its line, not a Hold.
	tb.click(`input[name="fare"][value="BUSINESS"]`)
	tb.waitVisible(`[data-sold-out="BUSINESS"] [data-action="join-waitlist"]`)
	if !eval[bool](tb, `document.querySelector('[data-action="hold"]').disabled`) {
		t.Error("Hold is enabled for a sold-out class")
	}
	tb.check("flight (a class sold out)")
	tb.joinWaitlist()
	if eval[bool](tb, `!!document.querySelector('[role="alert"]')`) {
		t.Errorf("an alert after joining: %q", tb.text(`[role="alert"]`))
	}
}

// My bookings names a flight by its code, route and departure (in the
// departure airport's zone, labelled), not its internal id, and says the
// status in the booking page's words. The booking page says its events in
// words, with the zone of its times; a quantity booking's seats are "to be
// assigned" while it is live, and not mentioned once it ended.
func TestBrowserBookingsInWords(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	bid := e.srv.Customer(8201).HoldQuantity(t, id, "ECONOMY", 2).BookingID
	tb := e.tab("customer", auth.Customer, 8201)
	tb.open("/app/bookings", `[data-booking-status="HELD"]`)
	row := fmt.Sprintf(`[...document.querySelectorAll('tr')].find((r) => r.querySelector('a[href="/app/bookings/%d"]'))`, bid)
	tb.waitFor("the flight named", row+`?.textContent.includes('BT101 SGN → HAN')`)
	what := eval[string](tb, row+`.cells[1].textContent`)
	if !strings.Contains(what, "Ho Chi Minh City time") || strings.Contains(what, fmt.Sprintf("Flight %d", id)) {
		t.Errorf("the row says %q, want the flight's code, route and departure, labelled with its zone", what)
	}
	if got := eval[string](tb, row+`.querySelector('[data-booking-status]').textContent`); got != "Held" {
		t.Errorf("the row's status reads %q, want Held", got)
	}
	tb.check("my bookings (in words)")

	tb.open(fmt.Sprintf("/app/bookings/%d", bid), `[data-event="booking.held"]`)
	if got := tb.text(`[data-event="booking.held"] strong`); got != "Held" {
		t.Errorf("the held event reads %q, want Held", got)
	}
	if got := tb.text(`[aria-label="Events"]`); !strings.Contains(got, "Ho Chi Minh City time") {
		t.Errorf("the events say %q, with no zone", got)
	}
	seats := `[...document.querySelectorAll('.kv dt')].filter((d) => d.textContent.startsWith('Seats')).map((d) => d.textContent + ': ' + d.nextElementSibling.textContent).join()`
	if got := eval[string](tb, seats); !strings.Contains(got, "to be assigned") {
		t.Errorf("the live quantity booking's seats read %q, want to be assigned", got)
	}
	tb.click(`[data-action="extend"]`)
	tb.waitVisible(`[data-extended]`)
	if got := tb.text(`[data-extended]`); !strings.Contains(got, "(Ho Chi Minh City time)") {
		t.Errorf("the extension note %q names no zone", got)
	}
	tb.waitVisible(`[data-event="booking.extended"]`)
	if got := tb.text(`[data-event="booking.extended"] strong`); strings.Contains(got, ".") {
		t.Errorf("the extension event reads %q, want words", got)
	}
	e.srv.Customer(8201).Cancel(t, bid)
	tb.open(fmt.Sprintf("/app/bookings/%d", bid), `[data-booking-status="CANCELLED"]`)
	if got := eval[string](tb, seats); got != "" {
		t.Errorf("a cancelled quantity booking shows %q", got)
	}
}

// A waitlist offer lost (its payment failed) says so under My waitlist,
// not "Done"; the flight page's place in line follows the line: once the
// seats are offered it says they are held, with the way to pay.
func TestBrowserWaitlistOfferOutcome(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	held := e.srv.Customer(8301).HoldQuantity(t, id, "ECONOMY", 6).BookingID
	fan := e.tab("fan", auth.Customer, 8302)
	fan.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"]`)
	fan.click(`input[name="fare"][value="ECONOMY"]`)
	fan.joinWaitlist()
	e.srv.Customer(8301).Cancel(t, held)
	fan.waitFor("the offer on the flight page", `document.querySelector('[data-waitlist-status]')?.dataset.waitlistStatus === 'OFFERED'`)
	if got := fan.text(`[data-waitlist-status]`); strings.Contains(got, "in line") || !strings.Contains(got, "held for you") {
		t.Errorf("after the offer the flight page says %q", got)
	}
	href := eval[string](fan, `document.querySelector('[data-waitlist-status] [data-action="offer"]').getAttribute('href')`)
	var offer int64
	if _, err := fmt.Sscanf(href, "/app/bookings/%d", &offer); err != nil {
		t.Fatalf("offer link %q: %v", href, err)
	}
	fan.check("flight (offered)")
	// The payment fails: the offer ends, the customer has no seat.
	u := e.srv.Customer(8302).StartPayment(t, offer, "pay-fail").CheckoutURL
	txn := u[strings.LastIndex(u, "/")+1:]
	if !e.srv.App.PaySim.Settle(txn, false) {
		t.Fatalf("settle %s: no such pending charge", txn)
	}
	fan.open("/app/bookings", `[data-waitlist-status="DONE"]`)
	fan.waitFor("the outcome", `document.querySelector('[data-waitlist-status="DONE"]').dataset.offerOutcome !== undefined`)
	if got := fan.text(`[data-waitlist-status="DONE"]`); got != "Offer ended: payment failed" {
		t.Errorf("the lost offer reads %q, want Offer ended: payment failed", got)
	}
	fan.waitFor("the flight named", `document.querySelector('[data-waitlist]').textContent.includes('BT101')`)
	if got := fan.text(`[data-waitlist]`); strings.Contains(got, fmt.Sprintf("#%d", id)) || !strings.Contains(got, "BT101") {
		t.Errorf("the waitlist row reads %q, want the flight's code", got)
	}
}

// Releasing a hold says the seats go and nothing was charged, not that
// nothing of the amount comes back.
func TestBrowserReleaseHoldQuestion(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	bid := e.srv.Customer(8401).HoldSeats(t, id, "ECONOMY", "3A").BookingID
	tb := e.tab("holder", auth.Customer, 8401)
	tb.open(fmt.Sprintf("/app/bookings/%d", bid), `[data-booking-status="HELD"]`)
	tb.askCancel()
	got := tb.text(`[role="dialog"]`)
	if strings.Contains(got, "get back") || !strings.Contains(got, "released") || !strings.Contains(got, "Nothing was charged") {
		t.Errorf("the release question reads %q, want the seats released and nothing charged", got)
	}
	tb.check("booking (release question)")
	tb.click(`[data-action="confirm-cancel"]`)
	tb.waitStatus("CANCELLED")
}
