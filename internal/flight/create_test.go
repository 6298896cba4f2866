package flight_test

import (
	"net/http"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
)

// A flight number names one flight a day, the day being the departure's
// date where it departs: a second flight of the number that day is
// refused, sent one after the other or all at once; the next local day's
// is not, even when both days are one day in UTC.
func TestFlightNumberIsOneFlightADay(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	ict := time.FixedZone("ICT", 7*3600)
	fares := []apptest.Fare{{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(1, 1, "AB")}}
	create := func(code string, dep time.Time) (int64, *apptest.Problem) {
		v, p := s.Admin().TryCreateFlight(t, apptest.Flight{Code: code, From: "SGN", To: "HAN", DepartureAt: dep, Fares: fares})
		return v.ID, p
	}

	first, p := create("ZZ102", time.Date(2027, 3, 4, 8, 0, 0, 0, ict))
	if p != nil {
		t.Fatalf("first ZZ102: %v", p)
	}
	_, p = create("ZZ102", time.Date(2027, 3, 4, 23, 30, 0, 0, ict))
	refused(t, "ZZ102 again later that day", p, http.StatusConflict, "invalid_state")
	_, p = create("ZZ102", time.Date(2027, 3, 4, 8, 0, 0, 0, ict))
	refused(t, "ZZ102 again at the same time", p, http.StatusConflict, "invalid_state")
	// 00:30 on the 5th in Saigon is the 4th in UTC, as 08:00 on the 4th is.
	if _, p := create("ZZ102", time.Date(2027, 3, 5, 0, 30, 0, 0, ict)); p != nil {
		t.Fatalf("ZZ102 on the next local day: %v", p)
	}
	if _, p := create("ZZ103", time.Date(2027, 3, 4, 8, 0, 0, 0, ict)); p != nil {
		t.Fatalf("another number the same day: %v", p)
	}
	if got := s.Admin().GetFlight(t, first); got.Code != "ZZ102" {
		t.Fatalf("the first ZZ102 reads %+v", got)
	}

	// Twelve creations of one number on one day at once, each at its own
	// time: one flight.
	ps := apptest.Race(12, func(i int) *apptest.Problem {
		_, p := create("ZZ104", time.Date(2027, 3, 6, 6+i, 0, 0, 0, ict))
		return p
	})
	made := 0
	for _, p := range ps {
		switch {
		case p == nil:
			made++
		case !p.Is(http.StatusConflict, "invalid_state"):
			t.Fatalf("a creation at once: %v", p)
		}
	}
	var n int
	if err := s.App.Pool.QueryRow(t.Context(), `SELECT count(*) FROM flight WHERE code = 'ZZ104'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if made != 1 || n != 1 {
		t.Fatalf("%d creations of ZZ104 answered 201 and %d flights stored, want 1 and 1", made, n)
	}
}
