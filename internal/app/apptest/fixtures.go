package apptest

import (
	"strconv"
	"testing"
	"time"
)

// Fare describes one fare class of a test flight.
type Fare struct {
	Class         string
	Price         int64
	Currency      string // default VND
	Capacity      int    // default len(Seats)
	OverbookLimit int
	Seats         []string
	Buckets       int // 0: the server's default
	// Refundable and RefundCutoff are the fare's refund rule (nil and
	// "": the server's default).
	Refundable   *int
	RefundCutoff string
}

// Seats lists the seats of rows first..last with the given letters, like
// Seats(10, 12, "ABC") = 10A 10B 10C 11A … 12C.
func Seats(first, last int, letters string) []string {
	var out []string
	for r := first; r <= last; r++ {
		for _, l := range letters {
			out = append(out, strconv.Itoa(r)+string(l))
		}
	}
	return out
}

// CreateFlight creates a flight SGN→HAN departing two days after the fake
// clock's epoch through the admin API and returns its id.
func (s *Server) CreateFlight(t testing.TB, fares ...Fare) int64 {
	t.Helper()
	return s.Admin().CreateFlight(t, Flight{DepartureAt: Epoch.Add(48 * time.Hour), Fares: fares}).ID
}

// CreateFlight creates a flight SGN→HAN departing at departure on the
// berth at base and returns its id.
func CreateFlight(t testing.TB, base, adminToken string, departure time.Time, fares ...Fare) int64 {
	t.Helper()
	return Client{Base: base, Token: adminToken}.CreateFlight(t, Flight{DepartureAt: departure, Fares: fares}).ID
}
