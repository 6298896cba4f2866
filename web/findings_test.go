package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/auth"
)

// forge returns token with its signature replaced: claims that read as
// good, which the server must refuse.
func forge(token string) string {
	return token[:strings.LastIndex(token, ".")+1] + "c2lnbmVkIGJ5IG5vYm9keQ"
}

// inView is true when the element sel is on screen.
func inView(sel string) string {
	return fmt.Sprintf(`(() => { const el = document.querySelector(%q); if (!el) return false;
  const r = el.getBoundingClientRect(); return r.height > 0 && r.top >= 0 && r.bottom <= innerHeight; })()`, sel)
}

// A hand-over that fails on a row far down the host's bookings shows its
// alert (with the code) where the host is looking, not above the table
// off screen.
func TestBrowserHostErrorNearRow(t *testing.T) {
	t.Parallel()
	e := start(t)
	from := e.srv.Clock.Now().Add(time.Hour)
	var bookings []int64
	for i := range 24 {
		car := e.car(5001, fmt.Sprintf("30A-%03d.50", i))
		bookings = append(bookings, e.carBooking(5002, car, from, from.Add(24*time.Hour), false))
	}
	e.pay(5002, bookings[0]) // the oldest: the last row

	host := e.tab("host", auth.Host, 5001)
	host.open("/app/host", fmt.Sprintf(`[data-action="pickup"][data-booking="%d"]`, bookings[0]))
	e.srv.Customer(5002).Cancel(t, bookings[0]) // the hand-over will be refused
	host.click(fmt.Sprintf(`[data-action="pickup"][data-booking="%d"]`, bookings[0]))
	host.waitVisible(`[role="alert"]`)
	if got := host.text(`[role="alert"]`); !strings.Contains(got, "invalid_state") {
		t.Errorf("alert %q, want invalid_state", got)
	}
	if !eval[bool](host, `new Promise(r => requestAnimationFrame(() => r(`+inView(`[role="alert"]`)+`)))`) {
		t.Errorf("the alert is off screen (top %v px, window %v px high)",
			eval[float64](host, `document.querySelector('[role="alert"]').getBoundingClientRect().top`), eval[float64](host, `innerHeight`))
	}
	host.check("host (hand-over refused)")
}

// A signed-in user who pastes a bad token stays signed in as before: the
// check with the server does not touch the stored token until it
// succeeds, and neither a refusal nor a network error wipes it.
func TestBrowserSigninKeepsSession(t *testing.T) {
	t.Parallel()
	e := start(t)
	good := e.srv.Token(auth.Admin, 5102)
	forged := forge(good)

	tb := e.tab("customer", auth.Customer, 5101)
	tb.open("/app/signin", "textarea")
	before := eval[string](tb, `sessionStorage.getItem('berth.token') || ''`)
	if before == "" {
		t.Fatal("the dev sign-in stored no token")
	}
	kept := func(what string) {
		t.Helper()
		if got := eval[string](tb, `sessionStorage.getItem('berth.token') || ''`); got != before {
			t.Errorf("%s: the stored token changed (now %q)", what, got)
		}
		if got := tb.text("#who"); !strings.Contains(got, "Signed in as customer 5101") {
			t.Errorf("%s: the header says %q", what, got)
		}
	}

	tb.run(setValue("textarea", forged))
	tb.click(`button[type="submit"]`)
	tb.waitVisible(`[role="alert"]`)
	if got := tb.text(`[role="alert"]`); !strings.Contains(got, "unauthenticated") {
		t.Errorf("forged token: alert %q, want unauthenticated", got)
	}
	kept("forged token")

	// The server cannot be reached while the token is checked.
	_ = eval[bool](tb, `(window.fetch = () => Promise.reject(new TypeError('offline')), true)`)
	tb.run(setValue("textarea", good))
	tb.click(`button[type="submit"]`)
	tb.waitFor("the network error", `document.querySelector('[role="alert"]')?.textContent.includes('network_error')`)
	kept("network error")
}

// A token handed over in the URL's fragment is kept only once the server
// has accepted it: a forged one leaves the session as it was, says
// unauthenticated and leaves the address bar. One the server could not
// check (busy) stays in the address bar, unkept, with a way to ask again,
// which then signs the browser in. A redirect to the page already open
// (only the fragment changes) counts too.
func TestBrowserFragmentTokenIsChecked(t *testing.T) {
	t.Parallel()
	e := start(t)
	good := e.srv.Token(auth.Host, 5112)
	forged := forge(good)

	tb := e.tab("customer", auth.Customer, 5111)
	before := eval[string](tb, `sessionStorage.getItem('berth.token') || ''`)
	tb.open("/app/bookings#access_token="+forged, `[role="alert"]`)
	if got := tb.text(`[role="alert"]`); !strings.Contains(got, "unauthenticated") {
		t.Errorf("forged token: alert %q, want unauthenticated", got)
	}
	if got := tb.text("#who"); !strings.Contains(got, "Signed in as customer 5111") {
		t.Errorf("forged token: the header says %q", got)
	}
	if got := eval[string](tb, `location.hash`); got != "" {
		t.Errorf("forged token: the address still has %q", got)
	}

	// The server is busy when the token comes, by a fragment change only.
	eval[bool](tb, `window.fetch = () => Promise.resolve(new Response(JSON.stringify({code: 'overloaded', status: 503, title: 'Service Unavailable', detail: 'busy'}),
  {status: 503, headers: {'Content-Type': 'application/problem+json', 'Retry-After': '1'}})); true`)
	eval[bool](tb, fmt.Sprintf(`location.hash = '#access_token=%s'; true`, good))
	tb.waitFor("the overloaded alert", `document.querySelector('[role="alert"]')?.textContent.includes('overloaded')`)
	if got := eval[string](tb, `location.hash`); !strings.Contains(got, "access_token=") {
		t.Errorf("busy: the token left the address bar (%q): a reload could not ask again", got)
	}
	if got := eval[string](tb, `sessionStorage.getItem('berth.token') || ''`); got != before {
		t.Errorf("busy: the stored token changed")
	}
	tb.click(`#main button`) // Try again: a reload, with the server answering
	tb.waitFor("the good token kept", `document.querySelector('#who')?.textContent.includes('Signed in as host 5112')`)
	if got := eval[string](tb, `sessionStorage.getItem('berth.token') || ''`); got != good {
		t.Errorf("good token: stored %q", got)
	}
	if got := eval[string](tb, `location.hash`); got != "" {
		t.Errorf("good token: the address still has %q", got)
	}
	tb.check("bookings (token from the fragment)")
}

// A flight page left open past the departure turns departed when the user
// next chooses a seat or presses Hold: the choice is not made, nothing is
// held, and the page says the flight has departed.
func TestBrowserFlightDepartsWhileOpen(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(1, 1, 0)
	// The browser's clock is moved past the departure (the page reads it).
	late := `(() => { const now = Date.now; Date.now = () => now() + 3 * 86400e3; return true })()`

	tb := e.tab("slow", auth.Customer, 5201)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"]`)
	tb.click(`[data-seat="3A"]`)
	tb.waitFor("3A selected", `document.querySelector('[data-seat="3A"]').dataset.status === 'SELECTED'`)
	_ = eval[bool](tb, late)
	tb.click(`[data-action="hold"]`)
	tb.waitFor("the departed notice", `!!document.querySelector('[data-departed]')`)
	if got := tb.text(`[data-departed]`); !strings.Contains(got, "departed") {
		t.Errorf("the page says %q, want that the flight has departed", got)
	}
	if eval[bool](tb, `!!document.querySelector('[data-action="hold"]')?.checkVisibility()`) {
		t.Error("the departed flight still offers Hold")
	}
	if got := eval[string](tb, `location.pathname`); got != fmt.Sprintf("/app/flights/%d", id) {
		t.Errorf("Hold went on to %s", got)
	}

	// The same when the user chooses a seat.
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"]`)
	_ = eval[bool](tb, late)
	tb.click(`[data-seat="3B"]`)
	tb.waitFor("the departed notice", `!!document.querySelector('[data-departed]')`)
	if got := eval[string](tb, `document.querySelector('[data-seat="3B"]').dataset.status`); got != "AVAILABLE" {
		t.Errorf("a click on 3B made it %s after the departure", got)
	}
	if got := eval[string](tb, `document.querySelector('[data-seat="3B"]').getAttribute('aria-disabled')`); got != "true" {
		t.Errorf("3B is aria-disabled=%q, want true", got)
	}
	if eval[bool](tb, `!!document.querySelector('[data-action="hold"]')?.checkVisibility()`) {
		t.Error("the departed flight still offers Hold")
	}
	tb.check("flight (departed while open)")
}

// The seat map's departed is the server's word: a page whose browser clock
// is behind the departure still turns departed at its next refresh once
// the server says the flight has gone.
func TestBrowserFlightDepartedByServerClock(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(1, 1, 0)
	tb := e.tab("behind", auth.Customer, 5202)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"]`)
	if eval[bool](tb, `!!document.querySelector('[data-departed]')`) {
		t.Fatal("the flight reads departed before its departure")
	}
	e.srv.Clock.Advance(3 * 24 * time.Hour) // the browser's clock stays where it is
	tb.waitFor("the departed notice", `!!document.querySelector('[data-departed]')`)
	if eval[bool](tb, `!!document.querySelector('[data-action="hold"]')?.checkVisibility()`) {
		t.Error("the departed flight still offers Hold")
	}
	tb.check("flight (departed by the server's clock)")
}

// An unknown flight or car is "Not found.": they are public, so "or not
// yours", which a booking that is someone else's reads, would be wrong.
func TestBrowserNotFoundWords(t *testing.T) {
	t.Parallel()
	e := start(t)
	tb := e.tab("lost", auth.Customer, 5203)
	for path, want := range map[string]string{"/app/cars/999999": "Not found.", "/app/flights/999999": "Not found.",
		"/app/bookings/999999": "Not found (or not yours)."} {
		tb.open(path, `[role="alert"]`)
		if got := tb.text(`[role="alert"] strong`); got != want {
			t.Errorf("%s says %q, want %q", path, got, want)
		}
	}
}

// focused says what has the focus: its data-action, its data-* hook, or
// its tag.
const focused = `(() => { const a = document.activeElement; if (!a || a === document.body) return 'body';
  if (a.dataset.action) return a.dataset.action; if ('listEnd' in a.dataset) return 'list-end';
  if (a.dataset.waitlistStatus) return 'waitlist-' + a.dataset.waitlistStatus; return a.tagName.toLowerCase(); })()`

// "Older bookings" that finds none moves the focus to the notice that
// says so, and announces it.
func TestBrowserOlderBookingsNoneFocus(t *testing.T) {
	t.Parallel()
	e := start(t)
	from := e.srv.Clock.Now().Add(time.Hour)
	for i := range 50 {
		car := e.car(5301, fmt.Sprintf("30A-%03d.53", i))
		e.carBooking(5302, car, from, from.Add(24*time.Hour), false)
	}
	tb := e.tab("customer", auth.Customer, 5302)
	tb.open("/app/bookings", `[data-action="older-bookings"]`)
	tb.click(`[data-action="older-bookings"]`)
	tb.waitFor("the control gone", `!document.querySelector('[data-action="older-bookings"]').checkVisibility()`)
	tb.waitFor("the announcement", `document.getElementById('announce').textContent.includes('No older bookings')`)
	if got := eval[string](tb, focused); got != "list-end" {
		t.Errorf("after an empty older page the focus is on %q, want the list's end notice", got)
	}
	if got := eval[string](tb, `document.activeElement.textContent`); !strings.Contains(got, "No older bookings") {
		t.Errorf("the focused notice says %q", got)
	}
	tb.check("my bookings (no older ones)")
}

// The cancel question gives the focus back to "Cancel booking" when it is
// answered "Keep it", and Escape closes it the same way.
func TestBrowserCancelDialogFocus(t *testing.T) {
	t.Parallel()
	e := start(t)
	tb, _ := e.rentalPage(5401, 5402, "30A-544.54", 48*time.Hour, true, `[data-action="cancel"]`)
	tb.askCancel()
	tb.click(`[data-action="keep-booking"]`)
	tb.waitFor("the question closed", `!document.querySelector('[role="dialog"]')`)
	if got := eval[string](tb, focused); got != "cancel" {
		t.Errorf("after Keep it the focus is on %q, want the Cancel booking button", got)
	}

	tb.askCancel()
	tb.escapeCancel()
	if got := eval[string](tb, focused); got != "cancel" {
		t.Errorf("after Escape the focus is on %q, want the Cancel booking button", got)
	}
	tb.waitStatus("CONFIRMED")
}

// After "Join the waitlist" the focus is on what joining did.
func TestBrowserJoinWaitlistFocus(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	e.srv.Customer(5501).HoldQuantity(t, id, "ECONOMY", 6)

	fan := e.tab("fan", auth.Customer, 5502)
	fan.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"]`)
	fan.click(`input[name="fare"][value="ECONOMY"]`)
	fan.joinWaitlist()
	if got := eval[string](fan, focused); got != "waitlist-WAITING" {
		t.Errorf("after joining the focus is on %q, want the place in line", got)
	}
}

// The waiting room waits as long as a rate_limited answer's Retry-After
// says before it asks again, not a second.
func TestBrowserWaitingRoomRetryAfter(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.queuedFlight(5602)
	tb := e.tab("queued", auth.Customer, 5601)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="6F"]`)
	// Every question to the waiting room is answered 429 rate_limited,
	// Retry-After: 3, and its time noted.
	_ = eval[bool](tb, `(() => { const real = window.fetch; window.__polls = [];
  window.fetch = (url, opts) => {
    if (!String(url).includes('/waiting-room/')) return real(url, opts);
    window.__polls.push(Date.now());
    return Promise.resolve(new Response(JSON.stringify({ code: 'rate_limited', status: 429, title: 'Too Many Requests' }),
      { status: 429, headers: { 'Content-Type': 'application/problem+json', 'Retry-After': '3' } }));
  };
  return true; })()`)
	tb.click(`[data-seat="6F"]`)
	tb.click(`[data-action="hold"]`)
	tb.waitFor("the waiting room", `!!document.querySelector('[data-waiting-room]')`)
	time.Sleep(5 * time.Second)
	polls := eval[[]float64](tb, `window.__polls`)
	if len(polls) < 2 {
		t.Fatalf("the waiting room was asked %d times in 5 s, want at least 2", len(polls))
	}
	for i := 1; i < len(polls); i++ {
		if gap := polls[i] - polls[i-1]; gap < 2900 {
			t.Errorf("asked again %.0f ms after a rate_limited answer with Retry-After: 3", gap)
		}
	}
}

// A car booking's row, in the host's list and in the customer's, says
// which car (its model) and when it is booked, in the car's time zone as
// its page does, not only the car's number.
func TestBrowserCarBookingRowSaysThePeriod(t *testing.T) {
	t.Parallel()
	e := start(t)
	// Noon UTC: the same calendar day in every zone a browser may be in.
	day := e.srv.Clock.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 10)
	from, to := day.Add(12*time.Hour), day.AddDate(0, 0, 3).Add(12*time.Hour)
	car := e.car(5301, "30A-530.01")
	id := e.carBooking(5302, car, from, to, false)
	row := fmt.Sprintf(`document.querySelector('a[href="/app/bookings/%d"]').closest('tr').textContent`, id)
	for _, c := range []struct {
		name, role string
		sub        int64
		path       string
	}{{"host", auth.Host, 5301, "/app/host"}, {"customer", auth.Customer, 5302, "/app/bookings"}} {
		tb := e.tab(c.name, c.role, c.sub)
		tb.open(c.path, fmt.Sprintf(`a[href="/app/bookings/%d"]`, id))
		tb.waitFor("the car's model in the row", row+`.includes('Toyota Vios')`)
		text := eval[string](tb, row)
		for _, want := range []string{from.Format("2 Jan"), to.Format("2 Jan"), "GMT+7"} { // the car's zone (Hanoi), not the browser's
			if !strings.Contains(text, want) {
				t.Errorf("%s: row %q does not say %q", c.name, text, want)
			}
		}
		tb.check(c.name + " (car booking row)")
	}
}

// Sold seats differ from available ones by lightness, not by hue alone:
// a contrast of at least 3:1 between their fills (WCAG's for graphics),
// for every fare class's colour.
func TestBrowserSoldSeatsStandOut(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 2, 0)
	for _, s := range []struct{ class, seat string }{{"BUSINESS", "1A"}, {"ECONOMY", "3A"}} {
		e.pay(5402, e.srv.Customer(5402).HoldSeats(t, id, s.class, s.seat).BookingID)
	}
	tb := e.tab("customer", auth.Customer, 5401)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"][data-status="SOLD"]`)
	contrast := func(a, b string) float64 {
		return eval[float64](tb, fmt.Sprintf(`(() => {
  const lum = (sel) => {
    const [r, g, b] = getComputedStyle(document.querySelector(sel + ' rect')).fill.match(/\d+/g).map(Number)
      .map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const [x, y] = [lum(%q), lum(%q)].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
})()`, a, b))
	}
	for _, pair := range [][2]string{{"1A", "1B"}, {"3A", "3B"}} {
		if got := contrast(fmt.Sprintf(`[data-seat="%s"]`, pair[0]), fmt.Sprintf(`[data-seat="%s"]`, pair[1])); got < 3 {
			t.Errorf("sold %s against available %s: contrast %.2f:1, want at least 3:1", pair[0], pair[1], got)
		}
	}
	tb.check("flight (sold seats)")
}

// A deep link to a flight or a car that is not there gets a heading with
// its alert, and a failure in the page itself (not an answer of the API)
// says so instead of showing "Code: error".
func TestBrowserFailedPageHasAHeading(t *testing.T) {
	t.Parallel()
	e := start(t)
	tb := e.tab("customer", auth.Customer, 5501)
	for _, path := range []string{"/app/flights/987654321", "/app/cars/987654321"} {
		tb.open(path, `[role="alert"]`)
		if got := tb.text("h1"); got != "Not found" {
			t.Errorf("%s: heading %q, want Not found", path, got)
		}
		if got := tb.text(`[role="alert"]`); !strings.Contains(got, "not_found") {
			t.Errorf("%s: alert %q, want not_found", path, got)
		}
	}
	tb.check("car (not found)")

	// The API's answer is not JSON: the page fails in itself.
	eval[bool](tb, `window.fetch = () => Promise.resolve(new Response('<html>', {status: 200, headers: {'Content-Type': 'application/json'}})); true`)
	eval[bool](tb, `history.pushState(null, '', '/app/cars/1'); dispatchEvent(new PopStateEvent('popstate')); true`)
	tb.waitVisible(`[role="alert"]`)
	if got := tb.text(`[role="alert"]`); strings.Contains(got, "Code") || !strings.Contains(got, "went wrong in this page") {
		t.Errorf("alert %q, want the page's own failure without a code", got)
	}
	if got := tb.text("h1"); got != "Something went wrong" {
		t.Errorf("heading %q, want Something went wrong", got)
	}
}

// A deep link with a trailing slash is the same page, and a signed-out
// visitor's unauthenticated alert offers the way to sign in.
func TestBrowserSignedOutDeepLink(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 2, 0)
	tb := e.tab("visitor", "", 0)
	tb.open(fmt.Sprintf("/app/flights/%d/", id), `[data-seat="3A"]`)
	tb.open("/app/bookings/1/", `[role="alert"]`)
	if got := tb.text(`[role="alert"]`); !strings.Contains(got, "unauthenticated") {
		t.Errorf("signed out: alert %q, want unauthenticated", got)
	}
	if !eval[bool](tb, `!!document.querySelector('[role="alert"] a[href^="/app/signin"]')`) {
		t.Error("the unauthenticated alert has no Sign in link")
	}
	tb.check("booking (signed out)")
}
