package flight_test

import (
	"fmt"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/httpapi"
)

// The search date is the departure date in the origin's time zone: a
// flight leaving Saigon at 00:30 local on the 5th departs on the 4th in UTC.
func TestSearchByLocalDepartureDate(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	ict := time.FixedZone("ICT", 7*3600)
	half := 50
	create := func(code string, dep time.Time) {
		s.Admin().CreateFlight(t, apptest.Flight{Code: code, From: "SGN", To: "NRT", DepartureAt: dep, ArrivalAt: dep.Add(6 * time.Hour),
			Fares: []apptest.Fare{{Class: "ECONOMY", Price: 5_000_000, Currency: "VND", Capacity: 3, OverbookLimit: 1,
				Seats: []string{"30A", "30B"}, Refundable: &half, RefundCutoff: "48h"}}})
	}
	create("VJ800", time.Date(2026, 12, 5, 0, 30, 0, 0, ict))
	create("VJ801", time.Date(2026, 12, 4, 23, 50, 0, 0, ict))
	search := func(date string) []httpapi.FlightView {
		return s.Anonymous().SearchFlights(t, "from=sgn&to=NRT&date="+date)
	}
	got := search("2026-12-05")
	if len(got) != 1 || got[0].Code != "VJ800" {
		t.Fatalf("flights on the 5th = %+v, want only VJ800", got)
	}
	f := got[0]
	if dep, arr := f.DepartureAt.Format(time.RFC3339), f.ArrivalAt.Format(time.RFC3339); dep != "2026-12-05T00:30:00+07:00" || arr != "2026-12-05T08:30:00+09:00" {
		t.Errorf("times %s → %s, want rendered in each airport's zone", dep, arr)
	}
	fare := f.Fares[0]
	if fare.Available != 4 || fare.Price != 5_000_000 || fare.Currency != "VND" {
		t.Errorf("fare = %+v, want 4 available (capacity 3 + overbook 1) at 5,000,000 VND", fare)
	}
	if fare.Capacity != nil || fare.OverbookLimit != nil || fare.Sold != nil || fare.Held != nil || fare.Buckets != nil {
		t.Errorf("public search shows admin counters: %+v", fare)
	}
	if got := search("2026-12-04"); len(got) != 1 || got[0].Code != "VJ801" {
		t.Errorf("flights on the 4th = %+v, want only VJ801", got)
	}
	if got := search("2026-12-06"); len(got) != 0 {
		t.Errorf("flights on the 6th = %+v, want none", got)
	}
	if got := s.Anonymous().GetFlight(t, f.ID); got.Code != "VJ800" {
		t.Errorf("GET /flights/%d: %+v, want VJ800", f.ID, got)
	}
}

// GET /bookings lists the caller's own bookings, newest first, in pages.
func TestListOwnBookingsPaged(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 50})
	var mine []int64
	for i := range 5 {
		for _, cust := range []int64{1, 2} {
			v := s.Customer(cust).HoldQuantity(t, flightID, "ECONOMY", 1+i%2)
			if cust == 1 {
				mine = append([]int64{v.BookingID}, mine...)
			}
		}
	}
	page := func(q string) []int64 {
		var ids []int64
		for _, b := range s.Customer(1).Bookings(t, q) {
			if b.CustomerID != 1 {
				t.Errorf("another customer's booking listed: %+v", b)
			}
			ids = append(ids, b.BookingID)
		}
		return ids
	}
	first := page("limit=3")
	if fmt.Sprint(first) != fmt.Sprint(mine[:3]) {
		t.Errorf("first page = %v, want %v", first, mine[:3])
	}
	rest := page(fmt.Sprintf("limit=3&before=%d", first[2]))
	if fmt.Sprint(rest) != fmt.Sprint(mine[3:]) {
		t.Errorf("second page = %v, want %v", rest, mine[3:])
	}
}
