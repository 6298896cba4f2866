package rental_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
)

// An extended car hold keeps the calendar for its new deadline: a customer
// who asks for an overlapping period after the old deadline is still
// refused, and once the new one passes the stale hold gives way.
func TestExtendedCarHoldKeepsTheCalendar(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("HN", "1h")
	held := e.book(1, c.ID, at(10, 8, 0), at(12, 8, 0))
	e.s.Clock.Advance(10 * time.Minute)
	r := e.s.Do(apptest.Request{Method: http.MethodPost, Path: fmt.Sprintf("/bookings/%d/extend", held), Token: e.s.Token("customer", 1)})
	if r.Status != http.StatusOK {
		t.Fatalf("extend: %d %s", r.Status, r.Body)
	}
	got, err := time.Parse(time.RFC3339, fmt.Sprint(r.Map(t)["holdExpiresAt"]))
	if want := apptest.Epoch.Add(20 * time.Minute); err != nil || !got.Equal(want) {
		t.Errorf("holdExpiresAt = %v (%v), want %s: the 15m hold + 5m", got, err, want)
	}
	e.s.Clock.Advance(6 * time.Minute) // past the old deadline, before the new
	if _, p := e.s.Customer(2).TryHoldCar(t, c.ID, at(11, 8, 0), at(13, 8, 0)); !p.Is(http.StatusConflict, "car_unavailable") {
		t.Fatalf("after the old deadline: %v, want 409 car_unavailable", p)
	}
	e.s.Clock.Advance(4 * time.Minute)
	e.book(2, c.ID, at(11, 8, 0), at(13, 8, 0))
	if got := e.status(held); got != "EXPIRED" {
		t.Errorf("the extended hold after its new deadline is %s, want EXPIRED", got)
	}
	apptest.MustAudit(t, e.pool(), e.s.Clock.Now())
}
