package web_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/internal/auth"
)

// A customer's flight journey end to end: search, the seat map, choosing a
// seat with the keyboard and another with the mouse, the hold with its live
// countdown, paying through the gateway's checkout and coming back, the
// booking CONFIRMED with its events in order, then cancelling with the
// refund shown before and after.
func TestBrowserFlightJourney(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 5, 0)
	tb := e.tab("customer", auth.Customer, 1001)

	tb.open("/app/?from=SGN&to=HAN", "article.card")
	tb.check("flight search")
	if got := tb.text("article.card"); !strings.Contains(got, "BT101") || !strings.Contains(got, "VND") || !strings.Contains(got, "Ho Chi Minh City time") {
		t.Errorf("search result %q: want the flight, its fares in VND and the departure zone", got)
	}
	tb.click(fmt.Sprintf(`a[href="/app/flights/%d"]`, id))
	tb.waitVisible(`[data-seat="3A"]`)
	tb.check("seat map")

	// The keyboard: focus the first economy seat, move right, choose it.
	tb.click(`input[name="fare"][value="ECONOMY"]`)
	tb.run(chromedpFocus(`[data-seat="3A"]`), keys("ArrowRight", " "))
	tb.waitFor("3B selected by the keyboard", `document.querySelector('[data-seat="3B"]').dataset.status === 'SELECTED'`)
	tb.click(`[data-seat="4C"]`)
	tb.waitFor("4C selected", `document.querySelector('[data-seat="4C"]').dataset.status === 'SELECTED'`)
	if got := eval[string](tb, `document.querySelector('[data-seat="4C"]').getAttribute('aria-label')`); got != "Seat 4C, Economy, selected" {
		t.Errorf("4C is announced as %q", got)
	}
	tb.docShot("seatmap.png")
	tb.click(`[data-action="hold"]`)
	tb.waitStatus("HELD")
	tb.check("booking (held)")
	expires := eval[string](tb, `document.querySelector('[data-hold-expires]').getAttribute('datetime')`)
	if ts, err := time.Parse(time.RFC3339Nano, expires); err != nil || ts.Sub(e.srv.Clock.Now()) != 10*time.Minute {
		t.Errorf("data-hold-expires %q: want the hold's deadline, 10 minutes from the hold", expires)
	}
	before := eval[string](tb, `document.querySelector('.countdown').textContent`)
	tb.waitFor("the countdown to tick", fmt.Sprintf(`document.querySelector('.countdown').textContent !== %q`, before))

	// Pay at the simulator's checkout page, and come back by its link.
	tb.click(`[data-action="pay"]`)
	tb.waitVisible(`button.pay`)
	if got := tb.text(".amount"); !strings.Contains(got, "2,400,000") {
		t.Errorf("checkout shows %q, want 2,400,000 VND (no minor unit)", got)
	}
	tb.click(`button.pay`)
	tb.waitFor("the payment taken", `document.querySelector('.note')?.textContent.includes('Payment succeeded')`)
	tb.click(`a[data-back]`)
	tb.waitStatus("CONFIRMED")
	tb.waitFor("the confirmation among the events", `[...document.querySelectorAll('[data-event]')].map(e => e.dataset.event).join() === 'booking.held,booking.confirmed'`)

	// Cancel: the refund is shown first, then made.
	tb.askCancel()
	quote := eval[string](tb, `document.querySelector('[data-refund-quote]').dataset.refundQuote`)
	if quote != "2400000" {
		t.Errorf("refund quote %s, want 2400000 (100 %% three days before departure)", quote)
	}
	tb.check("booking (cancel quote)")
	tb.click(`[data-action="confirm-cancel"]`)
	tb.waitStatus("CANCELLED")
	if got := tb.text("[data-refund]"); !strings.Contains(got, "2,400,000") {
		t.Errorf("refund shown %q, want 2,400,000", got)
	}
	tb.waitVisible(`[data-event="refund.requested"]`)

	// The seats are free again on the map.
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="4C"]`)
	tb.waitFor("4C available again", `document.querySelector('[data-seat="4C"]').dataset.status === 'AVAILABLE'`)
	tb.open("/app/bookings", "table")
	tb.check("my bookings")
}

// Two customers race for one seat in two browsers: exactly one gets it;
// the other sees seat_unavailable, and the seat turns HELD on their map
// without a reload.
func TestBrowserSeatRace(t *testing.T) {
	t.Parallel()
	e := start(t)
	id := e.flight(3, 5, 0)
	tabs := []*tab{e.tab("alice", auth.Customer, 2101), e.tab("bob", auth.Customer, 2102)}
	for _, tb := range tabs {
		tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="5D"]`)
		tb.click(`[data-seat="5D"]`)
		tb.waitFor("5D selected", `document.querySelector('[data-seat="5D"]').dataset.status === 'SELECTED'`)
		tb.run(markPage())
	}
	var wg sync.WaitGroup
	for _, tb := range tabs {
		wg.Go(func() { _ = eval[bool](tb, `(document.querySelector('[data-action="hold"]').click(), true)`) })
	}
	wg.Wait()
	winners := 0
	for _, tb := range tabs {
		tb.waitFor("an answer", `!!document.querySelector('[data-booking-status]') || !!document.querySelector('[role="alert"]')`)
		if eval[bool](tb, `!!document.querySelector('[data-booking-status]')`) {
			winners++
			continue
		}
		if got := tb.text(`[role="alert"]`); !strings.Contains(got, "seat_unavailable") {
			t.Errorf("%s: alert %q, want seat_unavailable", tb.name, got)
		}
		tb.waitFor("5D shown HELD", `document.querySelector('[data-seat="5D"]').dataset.status === 'HELD'`)
		if !eval[bool](tb, `window.__berthMark === true`) {
			t.Errorf("%s: the page was reloaded", tb.name)
		}
		tb.check("seat map (seat lost)")
	}
	if winners != 1 {
		t.Fatalf("%d browsers got seat 5D, want exactly 1", winners)
	}
}

// A hold answered 429 waiting_room shows the place in line, and goes on by
// itself once the room admits the browser: no reload, the seat still
// chosen.
func TestBrowserWaitingRoom(t *testing.T) {
	t.Parallel()
	e := start(t)
	// Someone queued first: the browser is second in line.
	id := e.queuedFlight(2201)
	tb := e.tab("queued", auth.Customer, 2202)
	tb.open(fmt.Sprintf("/app/flights/%d", id), `[data-seat="6F"]`)
	tb.run(markPage())
	tb.click(`[data-seat="6F"]`)
	tb.click(`[data-action="hold"]`)
	tb.waitVisible(`[data-waiting-room]`)
	tb.check("waiting room")
	if got := tb.text(`[data-waiting-room]`); !strings.Contains(got, "place in line: 2") {
		t.Errorf("waiting room shows %q, want place 2", got)
	}
	if got := eval[string](tb, `document.querySelector('[data-seat="6F"]').dataset.status`); got != "SELECTED" {
		t.Errorf("while waiting, 6F is %s, want still SELECTED", got)
	}
	// The room admits one a second: three seconds later it is our turn.
	e.srv.Clock.Advance(3 * time.Second)
	tb.waitStatus("HELD")
	if got := tb.text(".kv"); !strings.Contains(got, "6F") {
		t.Errorf("booking shows %q, want seat 6F", got)
	}
	if !eval[bool](tb, `window.__berthMark === true`) {
		t.Error("the page was reloaded while waiting")
	}
}
