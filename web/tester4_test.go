package web_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/auth"
)

// The outside web tester's third round: each test shows one finding
// fixed.

// inAlert is true when the focus is on an alert or inside one.
const inAlert = `!!document.activeElement?.closest('[role="alert"]')`

// settle waits two frames, so that layout and focus have caught up.
func settle(tb *tab) {
	tb.e.t.Helper()
	_ = eval[bool](tb, `new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`)
}

// A refused car booking moves the focus to its alert (on screen), never
// to the body; so does the signed-out visitor's Book, and a refused
// listing on the host's page. The alert's detail reads as a sentence: a
// capital letter, no API path.
func TestBrowserCarRefusalFocus(t *testing.T) {
	t.Parallel()
	e := start(t)
	car := e.car(8001, "30A-800.01")
	from := e.srv.Clock.Now().In(ict).Add(72 * time.Hour).Truncate(time.Hour)
	e.carBooking(8002, car, from, from.Add(24*time.Hour), false)
	link := fmt.Sprintf("/app/cars/%d?from=%s&to=%s", car, wall(from.Add(2*time.Hour)), wall(from.Add(48*time.Hour)))

	// Ready once the calendar is drawn: it grows above the form, which a
	// click must not race.
	tb := e.tab("customer", auth.Customer, 8003)
	tb.open(link, `[data-busy-list] li`)
	tb.run(chromedp.EmulateViewport(1100, 600))
	tb.click(`[data-action="book-car"]`)
	tb.waitFor("car_unavailable", `document.querySelector('[role="alert"]')?.textContent.includes('car_unavailable')`)
	settle(tb)
	if !eval[bool](tb, inAlert) {
		t.Errorf("after a refused booking the focus is on %q, want the alert", eval[string](tb, focused))
	}
	if !eval[bool](tb, inView(`[role="alert"]`)) {
		t.Error("the car_unavailable alert is off screen")
	}
	got := tb.text(`[role="alert"]`)
	if want := fmt.Sprintf("Car %d is booked", car); !strings.Contains(got, want) {
		t.Errorf("the alert says %q, want its detail as a sentence (%q)", got, want)
	}
	tb.check("car (booking refused)")

	visitor := e.tab("visitor", "", 0)
	visitor.open(link, `[data-busy-list] li`)
	visitor.click(`[data-action="book-car"]`)
	visitor.waitVisible(`[role="alert"]`)
	settle(visitor)
	if !eval[bool](visitor, inAlert) {
		t.Errorf("signed out, after Book the focus is on %q, want the alert", eval[string](visitor, focused))
	}

	host := e.tab("host", auth.Host, 8001)
	host.open("/app/host", `form button[type="submit"]`)
	// A city the API does not know (the form offers only known ones).
	_ = eval[bool](host, `(() => { const s = document.querySelector('select[name="city"]'); s.append(new Option('Nowhere (XX)', 'XX')); s.value = 'XX'; return true; })()`)
	host.run(setValue(`input[name="plate"]`, "30A-800.02"), setValue(`input[name="model"]`, "Kia Morning"))
	host.click(`form button[type="submit"]`)
	host.waitFor("the refusal", `document.querySelector('form [role="alert"]')?.textContent.includes('validation_failed')`)
	settle(host)
	if !eval[bool](host, inAlert) {
		t.Errorf("after a refused listing the focus is on %q, want the alert", eval[string](host, focused))
	}
	got = host.text(`form [role="alert"]`)
	if !strings.Contains(got, "City: XX is not a city berth rents cars in.") || strings.Contains(got, "GET /") {
		t.Errorf("the refusal says %q, want the detail as a sentence, without an API path", got)
	}
}

// The "list a car" form offers the cities berth rents cars in (name and
// code), and takes money in the currency's major unit: 45.00 EUR is 4500
// minor units, 800000 VND is 800000.
func TestBrowserListCarMajorUnits(t *testing.T) {
	t.Parallel()
	e := start(t)
	host := e.tab("host", auth.Host, 8101)
	host.open("/app/host", `form button[type="submit"]`)
	if got := eval[string](host, `[...document.querySelectorAll('select[name="city"] option')].map((o) => o.value + '=' + o.textContent).join(';')`); !strings.Contains(got, "HN=Hanoi (HN)") || !strings.Contains(got, "DN=Da Nang (DN)") {
		t.Fatalf("the city field offers %q, want the cities by name and code", got)
	}
	host.run(setValue(`select[name="city"]`, "DN"), setValue(`input[name="plate"]`, "43A-810.01"), setValue(`input[name="model"]`, "Fiat 500"),
		setValue(`input[name="currency"]`, "EUR"))
	_ = eval[bool](host, `(document.querySelector('input[name="currency"]').dispatchEvent(new Event('input', {bubbles: true})), true)`)
	host.run(setValue(`input[name="dailyPrice"]`, "45.00"), setValue(`input[name="deposit"]`, "300.5"))
	host.click(`form button[type="submit"]`)
	host.waitVisible(`form [role="status"]`)
	host.run(setValue(`input[name="plate"]`, "30A-810.02"), setValue(`input[name="model"]`, "Toyota Vios"))
	host.click(`form button[type="submit"]`)
	host.waitFor("the second car", `document.querySelectorAll('tr[data-car]').length === 2`)
	byPlate := map[string]string{}
	for _, c := range e.srv.Host(8101).HostCars(t, "").Cars {
		byPlate[c.Plate] = fmt.Sprintf("%s %d %d %s", c.City, c.DailyPrice, c.Deposit, c.Currency)
	}
	if got := byPlate["43A-810.01"]; got != "DN 4500 30050 EUR" {
		t.Errorf("45.00 and 300.5 EUR in Da Nang were listed as %q, want DN 4500 30050 EUR", got)
	}
	if got := byPlate["30A-810.02"]; got != "HN 800000 5000000 VND" {
		t.Errorf("the defaults were listed as %q, want HN 800000 5000000 VND", got)
	}
	host.check("host (major units)")
}

// The unauthenticated alert's Sign in link carries the page (path and
// query) to come back to, and signing in returns there; a next that
// leaves the origin is not followed. Host and Admin links are shown only
// to tokens with that role.
func TestBrowserSigninReturns(t *testing.T) {
	t.Parallel()
	e := start(t)
	good := e.srv.Token(auth.Customer, 8201)
	tb := e.tab("visitor", "", 0)
	tb.open("/app/bookings/1?x=1", `[role="alert"] a`)
	got := tb.text(`[role="alert"]`)
	if !strings.Contains(got, "An Authorization") || strings.Contains(got, "required..") {
		t.Errorf("signed out, the alert says %q, want its detail as one sentence with a capital", got)
	}
	href := eval[string](tb, `document.querySelector('[role="alert"] a').getAttribute('href')`)
	u, err := url.Parse(href)
	if err != nil || u.Path != "/app/signin" || u.Query().Get("next") != "/app/bookings/1?x=1" {
		t.Errorf("the Sign in link is %q, want /app/signin?next=/app/bookings/1?x=1 (escaped)", href)
	}
	tb.click(`[role="alert"] a`)
	tb.waitVisible("textarea")
	tb.run(setValue("textarea", good))
	tb.click(`button[type="submit"]`)
	tb.waitFor("signed in", `document.getElementById('who').textContent.includes('Signed in as customer 8201')`)
	if got := eval[string](tb, `location.pathname + location.search`); got != "/app/bookings/1?x=1" {
		t.Errorf("after signing in the page is %s, want /app/bookings/1?x=1", got)
	}

	for _, next := range []string{"//evil.example/app/", "https://evil.example/app/", "/\\evil.example/"} {
		v := e.tab("visitor", "", 0)
		v.open("/app/signin?"+url.Values{"next": {next}}.Encode(), "textarea")
		v.run(setValue("textarea", good))
		v.click(`button[type="submit"]`)
		v.waitFor("signed in", `document.getElementById('who').textContent.includes('Signed in')`)
		if got := eval[string](v, `location.href`); got != e.srv.URL+"/app/" {
			t.Errorf("next=%s: after signing in the page is %s, want %s/app/", next, got, e.srv.URL)
		}
	}

	// Hidden from every reader, not only by the stylesheet (reader modes
	// and text browsers drop it): the links are shown as if app.css were
	// off.
	shown := `(() => { for (const s of document.styleSheets) s.disabled = true;
  const v = [...document.querySelectorAll('.top nav a')].filter((a) => a.checkVisibility()).map((a) => a.textContent).join(',');
  for (const s of document.styleSheets) s.disabled = false; return v; })()`
	for _, c := range []struct {
		role string
		want string
	}{{"", "Flights,Cars,My bookings"}, {auth.Customer, "Flights,Cars,My bookings"}, {auth.Host, "Flights,Cars,My bookings,Host"}, {auth.Admin, "Flights,Cars,My bookings,Host,Admin"}} {
		v := e.tab("nav-"+c.role, c.role, 8202)
		v.open("/app/cars", "h1")
		if got := eval[string](v, shown); got != c.want {
			t.Errorf("role %q: the navigation shows %s, want %s", c.role, got, c.want)
		}
	}
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

// The car's calendar marks the days already over in the car's zone as
// past (not free), and the period of the link as chosen; a busy span
// made of several rentals is not described as one rental.
func TestBrowserCarCalendarPastAndPeriod(t *testing.T) {
	t.Parallel()
	e := start(t)
	car := e.car(8401, "30A-840.01")
	now := e.srv.Clock.Now().In(ict)
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, ict)
	// Two rentals whose turnarounds meet: one busy span.
	a := day.Add(5*24*time.Hour + 9*time.Hour)
	e.carBooking(8402, car, a, a.Add(24*time.Hour), false)
	e.carBooking(8403, car, a.Add(28*time.Hour), a.Add(48*time.Hour), false)
	from, to := day.Add(24*time.Hour+9*time.Hour), day.Add(3*24*time.Hour+9*time.Hour)
	tb := e.tab("customer", auth.Customer, 8404)
	tb.open(fmt.Sprintf("/app/cars/%d?from=%s&to=%s", car, wall(from), wall(to)), `[data-busy-list] li`)

	// The chosen days, in the month of from (the one shown).
	chosen := eval[string](tb, `[...document.querySelectorAll('.calendar td[data-chosen]')].map((d) => d.dataset.day).join(',')`)
	want := fmt.Sprintf("%d,%d,%d", from.Day(), from.Add(24*time.Hour).Day(), to.Day())
	if from.Month() == to.Month() && chosen != want {
		t.Errorf("the link's period %s–%s marks days %q, want %s", wall(from), wall(to), chosen, want)
	}
	if chosen == "" {
		t.Error("the link's period is not marked on the calendar")
	}
	if got := tb.text(`[data-busy-list]`); strings.Contains(got, "the rental") || !strings.Contains(got, "rentals") {
		t.Errorf("the busy list says %q: a span of two rentals is described as one", got)
	}
	tb.check("car (calendar with period)")

	// The days already over, in the month of today.
	if from.Month() != now.Month() {
		tb.click(`[data-month="prev"]`)
		tb.waitFor("the previous month", fmt.Sprintf(`document.getElementById('month')?.textContent.includes(%q)`, now.Month().String()))
	}
	past := eval[string](tb, `[...document.querySelectorAll('.calendar td[data-day]')].filter((d) => 'past' in d.dataset).map((d) => d.dataset.day).join(',')`)
	var wantPast []string
	for d := 1; d < now.Day(); d++ {
		wantPast = append(wantPast, fmt.Sprint(d))
	}
	if past != strings.Join(wantPast, ",") {
		t.Errorf("the days marked past are %q, want %q (today is %d)", past, strings.Join(wantPast, ","), now.Day())
	}
	if now.Day() > 1 {
		if got := tb.text(`.calendar td[data-day="1"]`); strings.Contains(got, "free") || !strings.Contains(got, "past") {
			t.Errorf("a past day says %q, want past, not free", got)
		}
	}
}
