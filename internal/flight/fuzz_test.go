package flight

import (
	"slices"
	"strings"
	"testing"
)

// FuzzHoldSeats feeds the seat-list check arbitrary lists: it never
// panics, and a list it accepts has 1 to MaxSeats distinct seat numbers
// like 12A, sorted (the lock order that keeps group holds from
// deadlocking), without touching the caller's slice.
func FuzzHoldSeats(f *testing.F) {
	for _, s := range []string{"12A,12B", "12B,12A,1C", "12A,12A", "", ",", "12a", "1A,2A,3A,4A,5A,6A,7A,8A,9A,10A", "999Z", "1000A", "12A\x00", "١٢A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		seats := strings.Split(list, ",")
		orig := slices.Clone(seats)
		r := HoldRequest{FlightID: 1, FareClass: "ECONOMY", Seats: seats}
		if err := r.Validate(); err != nil {
			return
		}
		if !slices.Equal(seats, orig) {
			t.Fatalf("Validate changed the caller's list %q to %q", orig, seats)
		}
		if len(r.Seats) < 1 || len(r.Seats) > MaxSeats || !slices.IsSorted(r.Seats) {
			t.Fatalf("accepted %q as %q", list, r.Seats)
		}
		for i, s := range r.Seats {
			if !seatRe.MatchString(s) || (i > 0 && r.Seats[i-1] == s) {
				t.Fatalf("accepted %q with seat %q", list, s)
			}
		}
	})
}
