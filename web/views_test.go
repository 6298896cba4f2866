package web_test

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
)

var ict = time.FixedZone("ICT", 7*3600)

// car lists a car in Hanoi for host, with a two-hour turnaround.
func (e *env) car(host int64, plate string) int64 {
	e.t.Helper()
	return e.srv.Host(host).CreateCar(e.t, apptest.Car{Plate: plate, Model: "Toyota Vios", City: "HN", DailyPrice: 800_000,
		Deposit: 5_000_000, Currency: "VND", Turnaround: "2h"}).ID
}

// carBooking holds car for customer from..to and, if pay, pays it through
// the simulator; it returns the booking id.
func (e *env) carBooking(customer, car int64, from, to time.Time, pay bool) int64 {
	e.t.Helper()
	id := e.srv.Customer(customer).HoldCar(e.t, car, from, to).BookingID
	if pay {
		e.pay(customer, id)
	}
	return id
}

// rentalPage has customer book a day's rental of host's new car (plate),
// picked up in pickupIn, paid or not, and opens its booking page in the
// customer's tab until ready shows: the tab and the booking's id.
func (e *env) rentalPage(host, customer int64, plate string, pickupIn time.Duration, paid bool, ready string) (*tab, int64) {
	e.t.Helper()
	from := e.srv.Clock.Now().Add(pickupIn)
	id := e.carBooking(customer, e.car(host, plate), from, from.Add(24*time.Hour), paid)
	tb := e.tab("customer", auth.Customer, customer)
	tb.open(fmt.Sprintf("/app/bookings/%d", id), ready)
	return tb, id
}

// soldOutInPage opens flight id's page as customer, chooses one unit of
// class by quantity, and waits for the page to say the class is sold out
// (Hold disabled, its waitlist offered).
func (e *env) soldOutInPage(customer, id int64, class string) *tab {
	e.t.Helper()
	tb := e.tab("buyer", auth.Customer, customer)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="3A"]`)
	tb.click(`input[name="mode"][value="quantity"]`)
	tb.click(fmt.Sprintf(`input[name="fare"][value="%s"]`, class))
	tb.waitVisible(fmt.Sprintf(`[data-sold-out="%s"] [data-action="join-waitlist"]`, class))
	if !eval[bool](tb, `document.querySelector('[data-action="hold"]').disabled`) {
		e.t.Errorf("Hold is enabled for sold-out %s", class)
	}
	return tb
}

// freezeFlightReads makes the page's reads of its flight (the fares and
// the seat map) wait until thawFlightReads: the page goes on showing what
// it read last, as a page whose refresh has not come yet does.
func (tb *tab) freezeFlightReads() {
	tb.e.t.Helper()
	_ = eval[bool](tb, `(() => { const real = window.__realFetch || window.fetch; window.__realFetch = real; window.__frozen = [];
  window.fetch = (url, opts) => {
    if ((opts?.method || 'GET') !== 'GET' || !/\/flights\/\d+(\/seats)?$/.test(String(url))) return real(url, opts);
    return new Promise((resolve) => window.__frozen.push(() => resolve(real(url, opts))));
  };
  return true; })()`)
}

func (tb *tab) thawFlightReads() {
	tb.e.t.Helper()
	_ = eval[bool](tb, `(() => { window.fetch = window.__realFetch; (window.__frozen || []).forEach((go) => go()); window.__frozen = []; return true; })()`)
}

// pay pays booking id through the simulator and waits until it is
// CONFIRMED.
func (e *env) pay(customer, id int64) {
	e.t.Helper()
	c := e.srv.Customer(customer)
	u, _ := url.Parse(c.StartPayment(e.t, id, fmt.Sprintf("pay-%d", id)).CheckoutURL)
	txn := u.Path[strings.LastIndex(u.Path, "/")+1:]
	if !e.srv.App.PaySim.Settle(txn, true) {
		e.t.Fatalf("settle %s: no such pending charge", txn)
	}
	apptest.Eventually(e.t, 15*time.Second, fmt.Sprintf("booking %d is not CONFIRMED after paying", id), func() bool {
		return c.GetBooking(e.t, id).Status == booking.Confirmed
	})
}

func wall(t time.Time) string { return t.In(ict).Format("2006-01-02T15:04") }

// A car found by city and period, its month calendar with another
// customer's booking shown busy (turnaround included), booked, paid and
// cancelled with the refund shown first.
func TestBrowserCarBookAndCancel(t *testing.T) {
	t.Parallel()
	e := start(t)
	car := e.car(3001, "30A-111.11")
	day := e.srv.Clock.Now().In(ict).Truncate(24*time.Hour).AddDate(0, 0, 10)
	pickup := time.Date(day.Year(), day.Month(), day.Day(), 9, 0, 0, 0, ict)
	// Someone else has the car two days later, for two days.
	e.carBooking(3101, car, pickup.AddDate(0, 0, 4), pickup.AddDate(0, 0, 6), false)

	tb := e.tab("renter", auth.Customer, 3102)
	q := url.Values{"city": {"HN"}, "from": {wall(pickup)}, "to": {wall(pickup.AddDate(0, 0, 3))}}
	tb.open("/app/cars?"+q.Encode(), "li.card a")
	tb.check("car search")
	tb.click("li.card a")
	tb.waitVisible("table.calendar")
	tb.waitVisible("[data-busy-list]")
	tb.check("car calendar")
	busy := tb.text("[data-busy-list]")
	// A rental of this car may not overlap the other booking's turnaround
	// on either side: busy from 07:00 to 11:00.
	if !strings.Contains(busy, "2h turnaround") || !strings.Contains(busy, "07:00") || !strings.Contains(busy, "11:00") {
		t.Errorf("busy list %q: want the other booking from 07:00 until 11:00 (09:00 less and plus the 2h turnaround), in Hanoi time", busy)
	}
	if got := eval[string](tb, fmt.Sprintf(`document.querySelector('[data-day="%d"]').dataset.busy`, pickup.AddDate(0, 0, 5).Day())); got != "full" {
		t.Errorf("the day inside the other booking shows %q, want full", got)
	}
	tb.docShot("car-calendar.png")
	tb.click(`[data-action="book-car"]`)
	tb.waitStatus("HELD")
	id, _ := strconv.ParseInt(strings.TrimPrefix(eval[string](tb, `location.pathname`), "/app/bookings/"), 10, 64)
	if got := tb.text(".kv"); !strings.Contains(got, "5,000,000") || !strings.Contains(got, "2,400,000") {
		t.Errorf("booking shows %q: want the 5,000,000 deposit and the 2,400,000 rental price", got)
	}
	e.pay(3102, id)
	tb.waitStatus("CONFIRMED")
	tb.askCancel()
	if got := eval[string](tb, `document.querySelector('[data-refund-quote]').dataset.refundQuote`); got != "5000000" {
		t.Errorf("refund quote %s, want the whole 5000000 deposit (ten days before pick-up)", got)
	}
	tb.click(`[data-action="confirm-cancel"]`)
	tb.waitStatus("CANCELLED")
	if got := tb.text("[data-refund]"); !strings.Contains(got, "5,000,000") {
		t.Errorf("refund shown %q, want 5,000,000", got)
	}
}

// A host sees their car's bookings, hands the car over and takes it back.
func TestBrowserHostHandover(t *testing.T) {
	t.Parallel()
	e := start(t)
	car := e.car(3201, "30A-222.22")
	other := e.car(3299, "30A-999.99")
	from := e.srv.Clock.Now().Add(time.Hour)
	id := e.carBooking(3202, car, from, from.Add(24*time.Hour), true)
	theirs := e.carBooking(3203, other, from, from.Add(24*time.Hour), true)

	tb := e.tab("host", auth.Host, 3201)
	tb.open("/app/host", fmt.Sprintf(`[data-action="pickup"][data-booking="%d"]`, id))
	tb.check("host")
	if eval[bool](tb, fmt.Sprintf(`!!document.querySelector('a[href="/app/bookings/%d"]')`, theirs)) {
		t.Error("the host sees another host's booking")
	}
	tb.click(fmt.Sprintf(`[data-action="pickup"][data-booking="%d"]`, id))
	tb.click(fmt.Sprintf(`[data-action="return"][data-booking="%d"]`, id))
	tb.waitFor("the booking completed", fmt.Sprintf(`[...document.querySelectorAll('tr')].some(r => r.querySelector('a[href="/app/bookings/%d"]') && r.querySelector('[data-booking-status="COMPLETED"]'))`, id))
	tb.open(fmt.Sprintf("/app/bookings/%d", id), "[data-booking-status]")
	tb.waitVisible(`[data-event="booking.completed"]`)
	got := eval[string](tb, `[...document.querySelectorAll('[data-event]')].map(e => e.dataset.event).join()`)
	if got != "booking.held,booking.confirmed,booking.on_trip,booking.completed" {
		t.Errorf("events %s, want held, confirmed, on_trip, completed in order", got)
	}
	tb.check("booking (host)")
}

// An admin watches a sold-out class, raises its overbooking limit, and the
// class sells again; the event backlog and the audit are on the same page.
func TestBrowserAdminOverbook(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 1, 0) // six economy seats
	e.srv.Customer(3301).HoldQuantity(t, id, "ECONOMY", 6)

	buyer := e.soldOutInPage(3302, id, "ECONOMY")

	admin := e.tab("admin", auth.Admin, 1)
	admin.open("/app/admin?from=SGN&to=HAN", fmt.Sprintf(`[data-flight="%d"] [data-fare="ECONOMY"]`, id))
	row := fmt.Sprintf(`[data-flight="%d"] [data-fare="ECONOMY"]`, id)
	if got := admin.text(row + ` [data-n="available"]`); got != "0" {
		t.Errorf("economy shows %s left, want 0", got)
	}
	admin.click(`[data-action="audit"]`)
	admin.waitVisible(`[data-audit-ok="true"]`)
	admin.waitVisible(`[data-backlog]`)
	admin.check("admin")
	admin.docShot("admin.png")
	admin.run(setValue(row+` input[type="number"]`, "2"))
	admin.click(row + ` [data-action="overbook"]`)
	admin.waitFor("two more to sell", fmt.Sprintf(`document.querySelector('%s [data-n="available"]').textContent === '2'`, row))

	// The buyer's page learns it by itself; the same hold now goes through.
	buyer.waitFor("economy on sale again", `document.querySelector('[data-available="ECONOMY"]').textContent === '2 left'`)
	buyer.click(`[data-action="hold"]`)
	buyer.waitStatus("HELD")
	admin.waitFor("the admin's counters moving", fmt.Sprintf(`document.querySelector('%s [data-n="held"]').textContent === '7'`, row))

	// The development sign-in page and the token sign-in page.
	admin.open("/dev/login", "form")
	admin.check("dev sign-in")
	admin.open("/app/signin", "textarea")
	admin.check("sign-in")
}
