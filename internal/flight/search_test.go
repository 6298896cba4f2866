package flight_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
)

// The search date is the departure date in the origin's time zone: a
// flight leaving Saigon at 00:30 local on the 5th departs on the 4th in UTC.
func TestSearchByLocalDepartureDate(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	admin := s.Token("admin", 1)
	ict := time.FixedZone("ICT", 7*3600)
	create := func(code string, dep time.Time) {
		r := s.Do(apptest.Request{Method: http.MethodPost, Path: "/admin/flights", Token: admin, Body: map[string]any{
			"code": code, "from": "SGN", "to": "NRT", "departureAt": dep.Format(time.RFC3339),
			"arrivalAt": dep.Add(6 * time.Hour).Format(time.RFC3339),
			"fares": []map[string]any{{"fareClass": "ECONOMY", "price": 5_000_000, "currency": "VND", "capacity": 3,
				"overbookLimit": 1, "seats": []string{"30A", "30B"}, "refundable": 50, "refundCutoff": "48h"}},
		}})
		if r.Status != http.StatusCreated {
			t.Fatalf("create %s: %d %s", code, r.Status, r.Body)
		}
	}
	create("VJ800", time.Date(2026, 12, 5, 0, 30, 0, 0, ict))
	create("VJ801", time.Date(2026, 12, 4, 23, 50, 0, 0, ict))
	search := func(date string) []map[string]any {
		r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/flights?from=sgn&to=NRT&date=" + date})
		if r.Status != http.StatusOK {
			t.Fatalf("search %s: %d %s", date, r.Status, r.Body)
		}
		var out struct{ Flights []map[string]any }
		r.JSON(t, &out)
		return out.Flights
	}
	got := search("2026-12-05")
	if len(got) != 1 || got[0]["code"] != "VJ800" {
		t.Fatalf("flights on the 5th = %v, want only VJ800", got)
	}
	f := got[0]
	if f["departureAt"] != "2026-12-05T00:30:00+07:00" || f["arrivalAt"] != "2026-12-05T08:30:00+09:00" {
		t.Errorf("times %v → %v, want rendered in each airport's zone", f["departureAt"], f["arrivalAt"])
	}
	fares := f["fares"].([]any)
	fare := fares[0].(map[string]any)
	if fare["available"] != float64(4) || fare["price"] != float64(5_000_000) || fare["currency"] != "VND" {
		t.Errorf("fare = %v, want 4 available (capacity 3 + overbook 1) at 5,000,000 VND", fare)
	}
	if _, leaked := fare["capacity"]; leaked {
		t.Errorf("public search shows admin counters: %v", fare)
	}
	if got := search("2026-12-04"); len(got) != 1 || got[0]["code"] != "VJ801" {
		t.Errorf("flights on the 4th = %v, want only VJ801", got)
	}
	if got := search("2026-12-06"); len(got) != 0 {
		t.Errorf("flights on the 6th = %v, want none", got)
	}
	id := int64(got0(t, search("2026-12-05"))["id"].(float64))
	if r := s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/flights/%d", id)}); r.Status != http.StatusOK || r.Map(t)["code"] != "VJ800" {
		t.Errorf("GET /flights/%d: %d %s", id, r.Status, r.Body)
	}
}

func got0(t *testing.T, fs []map[string]any) map[string]any {
	t.Helper()
	if len(fs) == 0 {
		t.Fatal("no flights")
	}
	return fs[0]
}

// GET /bookings lists the caller's own bookings, newest first, in pages.
func TestListOwnBookingsPaged(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Capacity: 50})
	var mine []float64
	for i := range 5 {
		for _, cust := range []int64{1, 2} {
			r := s.Do(apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: s.Token("customer", cust),
				Body: map[string]any{"flightId": flightID, "fareClass": "ECONOMY", "quantity": 1 + i%2}})
			if r.Status != http.StatusCreated {
				t.Fatalf("hold: %d %s", r.Status, r.Body)
			}
			if cust == 1 {
				mine = append([]float64{r.Map(t)["bookingId"].(float64)}, mine...)
			}
		}
	}
	page := func(q string) []float64 {
		r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/bookings" + q, Token: s.Token("customer", 1)})
		var out struct{ Bookings []map[string]any }
		r.JSON(t, &out)
		var ids []float64
		for _, b := range out.Bookings {
			if b["customerId"] != float64(1) {
				t.Errorf("another customer's booking listed: %v", b)
			}
			ids = append(ids, b["bookingId"].(float64))
		}
		return ids
	}
	first := page("?limit=3")
	if fmt.Sprint(first) != fmt.Sprint(mine[:3]) {
		t.Errorf("first page = %v, want %v", first, mine[:3])
	}
	rest := page(fmt.Sprintf("?limit=3&before=%d", int64(first[2])))
	if fmt.Sprint(rest) != fmt.Sprint(mine[3:]) {
		t.Errorf("second page = %v, want %v", rest, mine[3:])
	}
}
