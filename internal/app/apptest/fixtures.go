package apptest

import (
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Fare describes one fare class of a test flight.
type Fare struct {
	Class         string
	Price         int64
	Capacity      int // default len(Seats)
	OverbookLimit int
	Seats         []string
	Buckets       int // 0: the server's default
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

var flightSeq atomic.Int64

// CreateFlight creates a flight SGN→HAN departing two days after the fake
// clock's epoch through the admin API and returns its id.
func (s *Server) CreateFlight(t testing.TB, fares ...Fare) int64 {
	t.Helper()
	return CreateFlight(t, s.URL, s.Token("admin", 1), Epoch.Add(48*time.Hour), fares...)
}

// CreateFlight creates a flight on the berth at base.
func CreateFlight(t testing.TB, base, adminToken string, departure time.Time, fares ...Fare) int64 {
	t.Helper()
	var fs []map[string]any
	for _, f := range fares {
		capacity := f.Capacity
		if capacity == 0 {
			capacity = len(f.Seats)
		}
		seats := f.Seats
		if seats == nil {
			seats = []string{}
		}
		fs = append(fs, map[string]any{"fareClass": f.Class, "price": f.Price, "currency": "VND",
			"capacity": capacity, "overbookLimit": f.OverbookLimit, "seats": seats, "buckets": f.Buckets})
	}
	resp := Do(t, base, Request{Method: http.MethodPost, Path: "/admin/flights", Token: adminToken, Body: map[string]any{
		"code":        fmt.Sprintf("VN%d", 100+flightSeq.Add(1)),
		"from":        "SGN",
		"to":          "HAN",
		"departureAt": departure.Format(time.RFC3339),
		"arrivalAt":   departure.Add(2 * time.Hour).Format(time.RFC3339),
		"fares":       fs,
	}})
	if resp.Status != http.StatusCreated {
		t.Fatalf("create flight: %d %s", resp.Status, resp.Body)
	}
	var f struct {
		ID int64 `json:"id"`
	}
	resp.JSON(t, &f)
	return f.ID
}
