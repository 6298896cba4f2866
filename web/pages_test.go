package web_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/config"
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

// My bookings and the host's page load their lists a page at a time: a
// customer with 51 bookings sees 50 and "Older bookings" appends the 51st
// (before= the last one shown), then goes; the host of the 51 cars pages
// through their cars and their cars' bookings the same way, and a
// hand-over on an older page keeps the pages loaded.
func TestBrowserBookingListsPage(t *testing.T) {
	t.Parallel()
	e := start(t)
	from := e.srv.Clock.Now().Add(time.Hour)
	var cars, bookings []int64
	for i := range 51 {
		car := e.car(4201, fmt.Sprintf("30A-%03d.42", i))
		cars = append(cars, car)
		bookings = append(bookings, e.carBooking(4202, car, from, from.Add(24*time.Hour), false))
	}
	e.pay(4202, bookings[0]) // the oldest, on the second page

	rows := `document.querySelectorAll('table tbody a[href^="/app/bookings/"]').length`
	tb := e.tab("customer", auth.Customer, 4202)
	tb.open("/app/bookings", "table")
	if n := eval[int](tb, rows); n != 50 {
		t.Errorf("My bookings shows %d, want the newest 50", n)
	}
	if !eval[bool](tb, `!!document.querySelector('[data-action="older-bookings"]')?.checkVisibility()`) {
		t.Fatal("My bookings: no control loads the older bookings")
	}
	tb.click(`[data-action="older-bookings"]`)
	tb.waitFor("the 51st booking", fmt.Sprintf(`!!document.querySelector('a[href="/app/bookings/%d"]')`, bookings[0]))
	tb.waitFor("the control gone", `!document.querySelector('[data-action="older-bookings"]').checkVisibility()`)
	if n := eval[int](tb, rows); n != 51 {
		t.Errorf("My bookings shows %d after the older page, want 51", n)
	}
	tb.check("my bookings (two pages)")

	host := e.tab("host", auth.Host, 4201)
	host.open("/app/host", "table tbody")
	host.waitVisible(`[data-action="older-bookings"]`)
	if n := eval[int](host, `document.querySelectorAll('tr[data-car]').length`); n != 50 {
		t.Errorf("the host sees %d cars, want the first 50", n)
	}
	host.click(`[data-action="more-cars"]`)
	host.waitFor("the 51st car", fmt.Sprintf(`!!document.querySelector('tr[data-car="%d"]')`, cars[50]))
	host.waitFor("no more cars", `!document.querySelector('[data-action="more-cars"]').checkVisibility()`)
	host.click(`[data-action="older-bookings"]`)
	pickup := fmt.Sprintf(`[data-action="pickup"][data-booking="%d"]`, bookings[0])
	host.click(pickup)
	host.waitFor("the booking on its trip", fmt.Sprintf(`!!document.querySelector('[data-action="return"][data-booking="%d"]')`, bookings[0]))
	if n := eval[int](host, rows); n != 51 {
		t.Errorf("after the hand-over the host sees %d bookings, want still 51", n)
	}
	host.check("host (two pages)")
}

// Deep links with from, to or city that are not understood show the page
// with the usual values and a notice naming what was replaced: the
// calendar renders, the search runs, no alert.
func TestBrowserCarDeepLinkJunk(t *testing.T) {
	t.Parallel()
	e := start(t)
	car := e.car(4301, "30A-333.33")
	tb := e.tab("renter", auth.Customer, 4302)
	valid := `[...document.querySelectorAll('input[type="datetime-local"]')].every(i => /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$/.test(i.value))`

	for _, q := range []string{"from=abc&to=def", "from=2027-02-30T09:00&to=2027-13-01T09:00", "from=&to="} {
		tb.open(fmt.Sprintf("/app/cars/%d?%s", car, q), "table.calendar")
		if eval[bool](tb, `!!document.querySelector('[role="alert"]')`) {
			t.Errorf("%s: alert %q", q, tb.text(`[role="alert"]`))
		}
		if !eval[bool](tb, valid) {
			t.Errorf("%s: the period's fields are %s", q, eval[string](tb, `[...document.querySelectorAll('input[type="datetime-local"]')].map(i => i.value).join(' to ')`))
		}
		if q != "from=&to=" {
			if got := tb.text("[data-link-notice]"); !strings.Contains(got, "Pick-up") || !strings.Contains(got, "Return") {
				t.Errorf("%s: notice %q, want it to name Pick-up and Return", q, got)
			}
		}
	}
	tb.check("car calendar (a link not understood)")

	to := wall(e.srv.Clock.Now().AddDate(0, 0, 9))
	tb.open("/app/cars?city=%3Cjunk%3E&from=tomorrow&to="+url.QueryEscape(to), "li.card a")
	if eval[bool](tb, `!!document.querySelector('[role="alert"]')`) {
		t.Errorf("car search: alert %q", tb.text(`[role="alert"]`))
	}
	if got := tb.text("[data-link-notice]"); !strings.Contains(got, "City") || !strings.Contains(got, "Pick-up") || strings.Contains(got, "Return") {
		t.Errorf("car search: notice %q, want it to name the city and the pick-up only", got)
	}
	if !eval[bool](tb, valid) {
		t.Error("car search: the period's fields are not valid")
	}
	tb.check("car search (a link not understood)")
}

// A held seat is announced as held, not as "held by someone else": the
// map does not know whose hold it is, and it may be the viewer's own.
func TestBrowserHeldSeatLabel(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0)
	e.srv.Customer(4401).HoldSeats(t, id, "ECONOMY", "3A")
	tb := e.tab("holder", auth.Customer, 4401)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"][data-status="HELD"]`)
	if got := eval[string](tb, `document.querySelector('[data-seat="3A"]').getAttribute('aria-label')`); got != "Seat 3A, Economy, held" {
		t.Errorf("the holder's own seat is announced as %q, want \"Seat 3A, Economy, held\"", got)
	}
}

// The cancel question opens with the focus on keeping the booking; a host
// cancelling is told what the customer gets back, not "you get back".
func TestBrowserCancelQuestion(t *testing.T) {
	t.Parallel()
	e := start(t)
	car := e.car(4501, "30A-555.55")
	from := e.srv.Clock.Now().Add(48 * time.Hour)
	id := e.carBooking(4502, car, from, from.Add(24*time.Hour), true)

	customer := e.tab("customer", auth.Customer, 4502)
	customer.open(fmt.Sprintf("/app/bookings/%d", id), `[data-action="cancel"]`)
	customer.askCancel()
	if got := eval[string](customer, `document.activeElement.dataset.action || document.activeElement.textContent`); got != "keep-booking" {
		t.Errorf("the question opens with the focus on %q, want the safe choice (keep-booking)", got)
	}
	if got := customer.text(`[data-refund-quote] p`); !strings.Contains(got, "you get back") {
		t.Errorf("the customer is told %q, want what they get back", got)
	}
	customer.click(`[data-action="keep-booking"]`)

	host := e.tab("host", auth.Host, 4501)
	host.open(fmt.Sprintf("/app/bookings/%d", id), `[data-action="cancel"]`)
	host.askCancel()
	if got := host.text(`[data-refund-quote] p`); strings.Contains(got, "you get back") || !strings.Contains(got, "the customer gets back") {
		t.Errorf("the host is told %q, want what the customer gets back", got)
	}
	if got := eval[string](host, `document.activeElement.dataset.action || document.activeElement.textContent`); got != "keep-booking" {
		t.Errorf("the host's question opens with the focus on %q, want keep-booking", got)
	}
	host.check("booking (host's cancel question)")
}

// At 390 px wide the admin's counters keep each number on one line (a
// table squeezed narrow broke 132 into "13" over "2").
func TestBrowserAdminCountersNarrow(t *testing.T) {
	t.Parallel()
	e := start(t)
	dep := e.srv.Clock.Now().Add(72 * time.Hour).Truncate(time.Hour)
	id := e.srv.Admin().CreateFlight(t, apptest.Flight{Code: "BT132", DepartureAt: dep, Fares: []apptest.Fare{
		{Class: "BUSINESS", Price: 4_800_000, Capacity: 132},
		{Class: "PREMIUM", Price: 2_800_000, Capacity: 999},
		{Class: "ECONOMY", Price: 1_200_000, Capacity: 1000, OverbookLimit: 1000},
	}}).ID
	e.srv.Customer(4601).HoldQuantity(t, id, "ECONOMY", 9)

	admin := e.tab("admin", auth.Admin, 1)
	admin.open("/app/admin", fmt.Sprintf(`[data-flight="%d"] [data-fare="ECONOMY"]`, id))
	admin.run(chromedp.EmulateViewport(390, 844))
	broken := eval[string](admin, `new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(
	  [...document.querySelectorAll('[data-n]')].filter(td => {
	    const range = document.createRange();
	    range.selectNodeContents(td);
	    return new Set([...range.getClientRects()].map(x => Math.round(x.top))).size > 1;
	  }).map(td => td.closest('tr').dataset.fare + ' ' + td.dataset.n + ' ' + td.textContent).join('; ')))))`)
	if broken != "" {
		t.Errorf("at 390 px these numbers break over lines: %s", broken)
	}
	admin.check("admin (large counters)")
}

// A rate_limited answer says how long to wait, from its Retry-After.
func TestBrowserRateLimitedSaysTheWait(t *testing.T) {
	t.Parallel()
	browser(t)
	srv := apptest.Start(t, apptest.Options{
		App:    func(o *app.Options) { o.Dev = true },
		Config: func(c *config.Config) { c.HoldLimit = config.Rate{N: 1, Window: 15 * time.Minute} },
	})
	srv.Clock.Set(time.Now().UTC().Truncate(time.Second))
	e := &env{t: t, srv: srv}
	id := e.flight(3, 1, 0)
	e.srv.Customer(4701).HoldQuantity(t, id, "ECONOMY", 1)

	tb := e.tab("customer", auth.Customer, 4701)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3B"]`)
	tb.click(`[data-seat="3B"]`)
	tb.waitFor("3B selected", `document.querySelector('[data-seat="3B"]').dataset.status === 'SELECTED'`)
	tb.click(`[data-action="hold"]`)
	tb.waitVisible(`[role="alert"]`)
	if got := tb.text(`[role="alert"]`); !strings.Contains(got, "rate_limited") || !strings.Contains(got, "try again in about 15 minutes") {
		t.Errorf("alert %q, want rate_limited and the wait, about 15 minutes", got)
	}
}

// A pasted token is checked with the server before the page says who is
// signed in: one with a forged signature is refused, a good one kept.
func TestBrowserSigninChecksToken(t *testing.T) {
	t.Parallel()
	e := start(t)
	good := e.srv.Token(auth.Admin, 1002)
	forged := forge(good)

	tb := e.tab("visitor", "", 0)
	tb.open("/app/signin", "textarea")
	tb.run(setValue("textarea", forged))
	tb.click(`button[type="submit"]`)
	tb.waitVisible(`[role="alert"]`)
	if got := tb.text(`[role="alert"]`); !strings.Contains(got, "unauthenticated") {
		t.Errorf("forged token: alert %q, want unauthenticated", got)
	}
	if got := tb.text("#who"); strings.Contains(got, "Signed in") {
		t.Errorf("forged token: the page says %q", got)
	}
	if got := eval[string](tb, `sessionStorage.getItem('berth.token') || ''`); got != "" {
		t.Error("forged token: it was kept")
	}

	tb.run(setValue("textarea", good))
	tb.click(`button[type="submit"]`)
	tb.waitFor("signed in", `document.getElementById('who').textContent.includes('Signed in as admin 1002')`)
	if got := eval[string](tb, `location.pathname`); got != "/app/" {
		t.Errorf("after signing in the page is %s, want /app/", got)
	}
}

// A flight that has departed says so: its map is shown, but no seat can
// be chosen and there is no Hold to press.
func TestBrowserDepartedFlight(t *testing.T) {
	t.Parallel()
	e := start(t)
	now := e.srv.Clock.Now()
	e.srv.Clock.Set(now.Add(-48 * time.Hour))
	id := e.flight(1, 1, 0) // departs a day before now
	e.srv.Clock.Set(now)

	tb := e.tab("late", auth.Customer, 4801)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"]`)
	if got := eval[string](tb, `document.querySelector('[data-departed]')?.textContent || ''`); !strings.Contains(got, "departed") {
		t.Errorf("the page says %q, want that the flight has departed", got)
	}
	tb.click(`[data-seat="3A"]`)
	if got := eval[string](tb, `document.querySelector('[data-seat="3A"]').dataset.status`); got != "AVAILABLE" {
		t.Errorf("a click on 3A made it %s: want nothing chosen on a departed flight", got)
	}
	if got := eval[string](tb, `document.querySelector('[data-seat="3A"]').getAttribute('aria-disabled')`); got != "true" {
		t.Errorf("3A is aria-disabled=%q, want true", got)
	}
	if eval[bool](tb, `!!document.querySelector('[data-action="hold"]')?.checkVisibility()`) {
		t.Error("a departed flight offers Hold")
	}
	if !eval[bool](tb, `document.querySelector('[data-seat="3A"]').classList.contains('other-class')`) {
		t.Error("a departed flight's empty seat 3A is drawn as available, not pale")
	}
	tb.check("flight (departed)")
}

// A waiting room that answers place 0 (nobody ahead) says the turn has
// come, never "Your place in line: 0".
func TestBrowserWaitingRoomPlaceZero(t *testing.T) {
	t.Parallel()
	e := start(t)
	// Someone queued, and the room moved on past them before the browser
	// asked: the browser's ticket is issued behind the frontier.
	id := e.queuedFlight(4902)
	e.srv.Clock.Advance(10 * time.Second)
	tb := e.tab("queued", auth.Customer, 4901)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="6F"]`)
	tb.click(`[data-seat="6F"]`)
	tb.click(`[data-action="hold"]`)
	tb.waitFor("the waiting room", `!!document.querySelector('[data-waiting-room]')`)
	got := eval[string](tb, `document.querySelector('[data-waiting-room]')?.textContent || ''`)
	if strings.Contains(got, "place in line: 0") || !strings.Contains(got, "your turn has come") {
		t.Errorf("waiting room shows %q, want that the turn has come", got)
	}
	tb.waitStatus("HELD")
}
