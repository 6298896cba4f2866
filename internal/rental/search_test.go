package rental_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/httpapi"
	"berth.dev/berth/internal/rental"
)

// searchPath is GET /cars for city over [from, to), with extra parameters.
func searchPath(city string, from, to time.Time, extra ...string) string {
	v := url.Values{"city": {city}, "from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}}
	for i := 0; i+1 < len(extra); i += 2 {
		v.Set(extra[i], extra[i+1])
	}
	return "/cars?" + v.Encode()
}

// search returns the ids of the cars GET /cars lists, in order, and the
// nextAfter cursor.
func (e *env) search(path string) ([]int64, int64) {
	e.t.Helper()
	r := e.s.Do(apptest.Request{Method: http.MethodGet, Path: path})
	if r.Status != http.StatusOK {
		e.t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
	}
	var out struct {
		Cars []struct {
			ID int64 `json:"id"`
		} `json:"cars"`
		NextAfter int64 `json:"nextAfter"`
	}
	r.JSON(e.t, &out)
	ids := []int64{}
	for _, c := range out.Cars {
		ids = append(ids, c.ID)
	}
	return ids, out.NextAfter
}

// Search and calendar count a car busy for its bookings' periods plus its
// turnaround, on the side of existing bookings and of the period asked.
func TestSearchAndCalendarIncludeTurnaround(t *testing.T) {
	t.Parallel()
	e := start(t)
	buffered := e.listCar("DN", "2h")
	free := e.listCar("DN", "0s")
	idle := e.listCar("DN", "2h")
	other := e.listCar("HN", "0s")
	e.book(1, buffered.ID, at(10, 8, 0), at(10, 20, 0))
	e.book(1, free.ID, at(10, 8, 0), at(10, 20, 0))

	for _, tc := range []struct {
		from, to time.Time
		want     []int64
	}{
		// 21:00 is in the buffered car's turnaround after 20:00.
		{at(10, 21, 0), at(10, 23, 0), []int64{free.ID, idle.ID}},
		{at(10, 22, 0), at(11, 8, 0), []int64{buffered.ID, free.ID, idle.ID}},
		// Ending at 07:00 with two hours of turnaround runs into 08:00.
		{at(10, 5, 0), at(10, 7, 0), []int64{free.ID, idle.ID}},
		{at(10, 5, 0), at(10, 6, 0), []int64{buffered.ID, free.ID, idle.ID}},
		{at(10, 19, 0), at(10, 21, 0), []int64{idle.ID}},
	} {
		got, _ := e.search(searchPath("dn", tc.from, tc.to))
		if !slices.Equal(got, tc.want) {
			t.Errorf("search %s–%s: %v, want %v", tc.from.Format("02 15:04"), tc.to.Format("02 15:04"), got, tc.want)
		}
	}
	if got, _ := e.search(searchPath("HN", at(10, 8, 0), at(10, 9, 0))); !slices.Equal(got, []int64{other.ID}) {
		t.Errorf("search HN: %v, want only %d", got, other.ID)
	}

	// A booking starting when the turnaround ends touches the first: the
	// calendar shows one busy span, in the offset of the request. It
	// starts a turnaround before the first booking, as the search above
	// does (a rental ending after 06:00 runs into 08:00).
	e.book(2, buffered.ID, at(10, 22, 0), at(11, 2, 0))
	for _, tc := range []struct {
		from, to time.Time
		want     string
	}{
		{at(10, 0, 0), at(11, 0, 0), `[{"from":"2026-12-10T06:00:00+07:00","to":"2026-12-11T04:00:00+07:00"}]`},
		{at(10, 0, 0).UTC(), at(11, 0, 0).UTC(), `[{"from":"2026-12-09T23:00:00Z","to":"2026-12-10T21:00:00Z"}]`},
		// Only the first booking reaches into this window.
		{at(10, 5, 0), at(10, 7, 0), `[{"from":"2026-12-10T06:00:00+07:00","to":"2026-12-10T22:00:00+07:00"}]`},
		{at(12, 0, 0), at(13, 0, 0), `[]`},
	} {
		r := e.s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/cars/%d/calendar?%s", buffered.ID,
			url.Values{"from": {tc.from.Format(time.RFC3339)}, "to": {tc.to.Format(time.RFC3339)}}.Encode())})
		if r.Status != http.StatusOK {
			t.Fatalf("calendar: %d %s", r.Status, r.Body)
		}
		want := fmt.Sprintf(`{"busy":%s,"carId":%d}`+"\n", tc.want, buffered.ID)
		if string(r.Body) != want {
			t.Errorf("calendar %s–%s:\n got %s want %s", tc.from.Format(time.RFC3339), tc.to.Format(time.RFC3339), r.Body, want)
		}
	}
}

// A hold whose time is up does not make its car look busy, in search or
// calendar, even before anything expires it.
func TestStaleHoldsLookFree(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("CT", "0s")
	e.book(1, c.ID, at(10, 8, 0), at(11, 8, 0))
	e.s.Clock.Advance(15 * time.Minute)
	if got, _ := e.search(searchPath("CT", at(10, 9, 0), at(10, 10, 0))); !slices.Equal(got, []int64{c.ID}) {
		t.Errorf("search over an expired hold: %v, want %d", got, c.ID)
	}
	r := e.s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/cars/%d/calendar?%s", c.ID,
		url.Values{"from": {at(10, 0, 0).Format(time.RFC3339)}, "to": {at(12, 0, 0).Format(time.RFC3339)}}.Encode())})
	if want := fmt.Sprintf(`{"busy":[],"carId":%d}`+"\n", c.ID); string(r.Body) != want {
		t.Errorf("calendar over an expired hold: %s, want %s", r.Body, want)
	}
}

// A search may show a car that was just booked, from the city's calendar
// kept in memory; holding it still fails, because holds ask only the
// database. The calendar is reloaded within about a second.
func TestSearchCacheNeverSellsTwice(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("NT", "1h")
	path := searchPath("NT", at(10, 8, 0), at(12, 8, 0))
	if got, _ := e.search(path); !slices.Equal(got, []int64{c.ID}) {
		t.Fatalf("search before booking: %v, want %d", got, c.ID)
	}
	e.book(1, c.ID, at(10, 8, 0), at(12, 8, 0))
	// Still listed: the answer comes from the calendar loaded before the
	// booking (which is what makes the rest of this test mean something).
	if got, _ := e.search(path); !slices.Equal(got, []int64{c.ID}) {
		t.Fatalf("cached search after booking: %v, want the stale answer %d", got, c.ID)
	}
	before := snapshot(t, e.pool())
	if _, p := e.s.Customer(2).TryHoldCar(t, c.ID, at(10, 8, 0), at(12, 8, 0)); !p.Is(http.StatusConflict, "car_unavailable") {
		t.Fatalf("booking a car the cache shows free: %v, want 409 car_unavailable", p)
	}
	if after := snapshot(t, e.pool()); after != before {
		t.Errorf("the refused booking changed the database: %+v → %+v", before, after)
	}
	// About a second on, a search has the city's calendar reloaded (in
	// the background: the search that notices still gets the old one),
	// and the searches after it, of any period, see the booking.
	other := searchPath("NT", at(10, 8, 0), at(12, 8, 0), "limit", "10")
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := e.search(other)
		if len(got) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("search 10 s after booking: %v, want none", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got, _ := e.search(path); len(got) != 0 {
		t.Errorf("the first search again, after the reload: %v, want none", got)
	}
	apptest.MustAudit(t, e.pool(), e.s.Clock.Now())
}

func TestSearchPages(t *testing.T) {
	t.Parallel()
	e := start(t)
	var all []int64
	for range 5 {
		all = append(all, e.listCar("PQ", "0s").ID)
	}
	e.book(1, all[1], at(10, 8, 0), at(11, 8, 0))
	got, next := e.search(searchPath("PQ", at(10, 8, 0), at(11, 8, 0), "limit", "2"))
	if want := []int64{all[0], all[2]}; !slices.Equal(got, want) || next != all[2] {
		t.Fatalf("first page: %v next %d, want %v next %d", got, next, want, all[2])
	}
	got, next = e.search(searchPath("PQ", at(10, 8, 0), at(11, 8, 0), "limit", "2", "after", fmt.Sprint(next)))
	if want := []int64{all[3], all[4]}; !slices.Equal(got, want) || next != 0 {
		t.Fatalf("last page: %v next %d, want %v and no next", got, next, want)
	}
	if got, next := e.search(searchPath("PQ", at(10, 8, 0), at(11, 8, 0))); len(got) != 4 || next != 0 {
		t.Errorf("default page: %v next %d, want the 4 free cars", got, next)
	}
}

func TestSearchAndCalendarBadInputs(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.listCar("HN", "0s")
	from, to := at(10, 8, 0), at(11, 8, 0)
	cal := func(f, t string) string {
		return fmt.Sprintf("/cars/%d/calendar?%s", c.ID, url.Values{"from": {f}, "to": {t}}.Encode())
	}
	for _, tc := range []struct {
		path   string
		status int
		field  string
	}{
		{"/cars?from=" + url.QueryEscape(from.Format(time.RFC3339)) + "&to=" + url.QueryEscape(to.Format(time.RFC3339)), 422, "city"},
		{searchPath("Hà Nội", from, to), 422, "city"},
		{"/cars?city=HN&to=" + url.QueryEscape(to.Format(time.RFC3339)), 422, "from"},
		{"/cars?city=HN&from=2026-12-10T08:00:00&to=" + url.QueryEscape(to.Format(time.RFC3339)), 422, "from"},
		{"/cars?city=HN&from=" + url.QueryEscape(from.Format(time.RFC3339)) + "&to=2026-12-11", 422, "to"},
		{searchPath("HN", to, from), 422, "to"},
		{searchPath("HN", from, from), 422, "to"},
		{searchPath("HN", apptest.Epoch.Add(-time.Hour), to), 422, "from"},
		{searchPath("HN", from, from.AddDate(0, 0, 91)), 422, "to"},
		{searchPath("HN", from, to, "limit", "0"), 422, "limit"},
		{searchPath("HN", from, to, "limit", "501"), 422, "limit"},
		{searchPath("HN", from, to, "limit", "many"), 422, "limit"},
		{searchPath("HN", from, to, "after", "-1"), 422, "after"},
		{cal(to.Format(time.RFC3339), from.Format(time.RFC3339)), 422, "to"},
		{cal(from.Format(time.RFC3339), from.AddDate(1, 0, 2).Format(time.RFC3339)), 422, "to"},
		{cal("2026-12-10T08:00:00", to.Format(time.RFC3339)), 422, "from"},
		{cal(from.Format(time.RFC3339), ""), 422, "to"},
		{fmt.Sprintf("/cars/999999/calendar?from=%s&to=%s", url.QueryEscape(from.Format(time.RFC3339)), url.QueryEscape(to.Format(time.RFC3339))), 404, ""},
		{"/cars/999999", 404, ""},
		{"/cars/abc", 404, ""},
		{"/cars/0", 404, ""},
	} {
		r := e.s.Do(apptest.Request{Method: http.MethodGet, Path: tc.path})
		status, code, field := problem(t, r)
		wantCode := map[int]string{404: "not_found", 422: "validation_failed"}[tc.status]
		if status != tc.status || code != wantCode || field != tc.field {
			t.Errorf("GET %s: %d %s field %q, want %d %s field %q", tc.path, status, code, field, tc.status, wantCode, tc.field)
		}
	}
}

func TestListAndGetCars(t *testing.T) {
	t.Parallel()
	e := start(t)
	// Raw bodies: the table below sends what the typed client cannot
	// (missing and unknown fields), and the first answer's Location header
	// is checked.
	body := func(plate string) map[string]any {
		return map[string]any{"plate": plate, "model": "VinFast VF 8", "city": "HCM", "dailyPrice": 1_500_000,
			"deposit": 10_000_000, "currency": "VND", "turnaround": "1h30m"}
	}
	r := e.s.Do(apptest.Request{Method: http.MethodPost, Path: "/host/cars", Token: e.s.Token("host", 42), Body: body("51k 888.88")})
	if r.Status != http.StatusCreated {
		t.Fatalf("list car: %d %s", r.Status, r.Body)
	}
	var created httpapi.CarView
	r.JSON(t, &created)
	id := created.ID
	if created.HostID != 42 || created.Plate != "51K888.88" || created.Turnaround != "1h30m" ||
		r.Header.Get("Location") != fmt.Sprintf("/cars/%d", id) {
		t.Errorf("created %+v (Location %q)", created, r.Header.Get("Location"))
	}
	admin3 := apptest.Client{Base: e.s.URL, Token: e.s.Token("admin", 3)}
	if v := admin3.CreateCar(t, apptest.Car{Plate: "51K-999.99", Model: "VinFast VF 8", City: "HCM", DailyPrice: 1_500_000,
		Deposit: 10_000_000, Currency: "VND", Turnaround: "1h30m"}); v.HostID != 3 {
		t.Errorf("an admin lists a car: %+v, want it listed under admin 3", v)
	}

	g := e.s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/cars/%d", id)})
	want := fmt.Sprintf(`{"id":%d,"model":"VinFast VF 8","city":"HCM","dailyPrice":1500000,"deposit":10000000,"currency":"VND","turnaround":"1h30m","timeZone":"Asia/Ho_Chi_Minh"}`+"\n", id)
	if g.Status != http.StatusOK || string(g.Body) != want {
		t.Errorf("GET /cars/%d: %d %s, want %s", id, g.Status, g.Body, want)
	}

	for _, tc := range []struct {
		name   string
		token  string
		body   any
		status int
		code   string
		field  string
	}{
		{"a customer", e.s.Token("customer", 1), body("51K-111.11"), 403, "forbidden", ""},
		{"no token", "", body("51K-111.11"), 401, "unauthenticated", ""},
		{"a plate already listed", e.s.Token("host", 43), body("51K 888.88"), 422, "validation_failed", "plate"},
		{"a turnaround in words", e.s.Token("host", 42), func() any { b := body("51K-111.11"); b["turnaround"] = "2 hours"; return b }(), 422, "validation_failed", "turnaround"},
		{"a negative turnaround", e.s.Token("host", 42), func() any { b := body("51K-111.11"); b["turnaround"] = "-1h"; return b }(), 422, "validation_failed", "turnaround"},
		{"no price", e.s.Token("host", 42), func() any { b := body("51K-111.11"); delete(b, "dailyPrice"); return b }(), 422, "validation_failed", "dailyPrice"},
		{"a host field", e.s.Token("host", 42), func() any { b := body("51K-111.11"); b["hostId"] = 7; return b }(), 400, "invalid_request", ""},
	} {
		before := snapshot(t, e.pool())
		r := e.s.Do(apptest.Request{Method: http.MethodPost, Path: "/host/cars", Token: tc.token, Body: tc.body})
		status, code, field := problem(t, r)
		if status != tc.status || code != tc.code || field != tc.field {
			t.Errorf("%s: %d %s field %q, want %d %s field %q", tc.name, status, code, field, tc.status, tc.code, tc.field)
		}
		if after := snapshot(t, e.pool()); after != before {
			t.Errorf("%s changed the database: %+v → %+v", tc.name, before, after)
		}
	}
}

// A search page asks for its city's zone once per car: Zone answers from
// the cities it loaded, one *time.Location per city, not a zone file read
// per call; a city berth does not list is UTC.
func TestZoneIsLoadedOncePerCity(t *testing.T) {
	t.Parallel()
	e := start(t)
	svc := newService(e.pool(), time.Minute)
	ctx := t.Context()
	hn := svc.Zone(ctx, "HN")
	if hn.String() != "Asia/Ho_Chi_Minh" {
		t.Fatalf("HN's zone is %s, want Asia/Ho_Chi_Minh", hn)
	}
	if again := svc.Zone(ctx, "HN"); again != hn {
		t.Fatalf("HN's zone was loaded again (%p, then %p)", hn, again)
	}
	if z := svc.Zone(ctx, "ZZ"); z != time.UTC {
		t.Fatalf("an unlisted city's zone is %s, want UTC", z)
	}
}

// Search answers from a city's calendar kept in memory. Over a calendar
// of holds live and run out, confirmed bookings and turnarounds, every
// page of every period it gives is the page PostgreSQL gives for the same
// question at the same time (its range overlap over the bookings' blocked
// ranges), also when holds run out between the load and the search.
func TestSearchFromMemoryMatchesTheDatabase(t *testing.T) {
	t.Parallel()
	e := start(t)
	ctx := context.Background()
	var cars []car
	for _, ta := range []string{"0s", "30m", "2h", "0s", "1h", "6h", "0s", "45m"} {
		cars = append(cars, e.listCar("DN", ta))
	}
	e.listCar("HN", "0s") // another city's car is never listed
	rng := rand.New(rand.NewPCG(7, 11))
	customer := int64(100)
	hold := func(n int) []int64 {
		var ids []int64
		for range n {
			customer++
			from := at(10+rng.IntN(10), rng.IntN(24), 0)
			to := from.Add(time.Duration(1+rng.IntN(60)) * time.Hour)
			v, p := e.s.Customer(customer).TryHoldCar(t, cars[rng.IntN(len(cars))].ID, from, to)
			switch {
			case p == nil:
				ids = append(ids, v.BookingID)
			case !p.Is(http.StatusConflict, "car_unavailable"):
				t.Fatalf("hold: %v", p)
			}
		}
		return ids
	}
	first := hold(40)
	for _, id := range first[:len(first)/3] {
		e.confirm(id)
	}
	e.s.Clock.Advance(10 * time.Minute)
	hold(40)
	// The first holds not confirmed run out; the second's are live until
	// ten minutes later, and run out between load and search below.
	e.s.Clock.Advance(6 * time.Minute)
	loaded := e.s.Clock.Now()

	oracle := func(q rental.SearchQuery, now time.Time) []int64 {
		rows, err := e.pool().Query(ctx, `SELECT c.id FROM car c
			WHERE c.city = $1 AND c.id > $2
			  AND NOT EXISTS (SELECT 1 FROM booking b
				WHERE b.kind = 'car' AND b.car_id = c.id AND b.status IN ('HELD', 'CONFIRMED', 'ON_TRIP')
				  AND b.blocked && tstzrange($3::timestamptz, $4::timestamptz + c.turnaround, '[)')
				  AND NOT (b.status = 'HELD' AND b.hold_expires_at <= $5))
			ORDER BY c.id LIMIT $6`, q.City, q.After, q.From, q.To, now, q.Limit+1)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	compared, differ := 0, 0
	for _, now := range []time.Time{loaded, loaded.Add(10 * time.Minute)} {
		for range 300 {
			from := at(10+rng.IntN(11), rng.IntN(24), 30*rng.IntN(2))
			q := rental.SearchQuery{City: "DN", From: from, To: from.Add(time.Duration(1+rng.IntN(48)) * time.Hour),
				Limit: 1 + rng.IntN(len(cars)+1)}
			if rng.IntN(3) == 0 {
				q.After = cars[rng.IntN(len(cars))].ID
			}
			res, err := rental.SearchLoadedAt(ctx, e.pool(), q, loaded, now)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, c := range res.Cars {
				got = append(got, c.ID)
			}
			want := oracle(q, now) // a page and one car more, if any
			more := len(want) > q.Limit
			want = want[:min(len(want), q.Limit)]
			if !slices.Equal(got, want) || res.More != more {
				t.Errorf("search %s–%s after %d limit %d at %s: %v more %v, the database says %v more %v",
					q.From.Format("02 15:04"), q.To.Format("02 15:04"), q.After, q.Limit, now.Format("15:04"), got, res.More, want, more)
			}
			compared++
			if len(want) < min(q.Limit, len(cars)) || q.After == 0 && len(want) < len(cars) {
				differ++
			}
		}
	}
	// The calendar must actually be busy for the comparison to mean
	// something: most questions find some car taken.
	if differ < compared/2 {
		t.Errorf("only %d of %d searches found a car taken: the test's calendar is too empty", differ, compared)
	}
}

// A search's page is put together from each car's JSON encoded once; its
// bytes are what encoding the page whole gives: each car as GET /cars/{id}
// shows it (HTML-escaped the same way), and nextAfter only while there may
// be more.
func TestSearchPageIsEachCarAsShownAlone(t *testing.T) {
	t.Parallel()
	e := start(t)
	var ids []int64
	for _, model := range []string{`VinFast <VF8> & "Plus"`, "Kia Morning – bản đặc biệt", "Toyota Vios"} {
		n := seq.Add(1)
		ids = append(ids, apptest.Client{Base: e.s.URL, Token: e.s.Token("host", 500)}.CreateCar(t, apptest.Car{
			Plate: fmt.Sprintf("30K-%03d.%02d", n/100%1000, n%100), Model: model, City: "HP",
			DailyPrice: 700_000, Deposit: 1_000_000, Currency: "VND", Turnaround: "1h"}).ID)
	}
	alone := func(id int64) string {
		r := e.s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/cars/%d", id)})
		if r.Status != http.StatusOK {
			t.Fatalf("GET /cars/%d: %d %s", id, r.Status, r.Body)
		}
		return strings.TrimSuffix(string(r.Body), "\n")
	}
	for _, tc := range []struct {
		limit string
		want  string
	}{
		{"2", `{"cars":[` + alone(ids[0]) + "," + alone(ids[1]) + `],"nextAfter":` + fmt.Sprint(ids[1]) + "}\n"},
		{"3", `{"cars":[` + alone(ids[0]) + "," + alone(ids[1]) + "," + alone(ids[2]) + "]}\n"},
	} {
		for range 2 { // encoded, then from the encoding kept
			r := e.s.Do(apptest.Request{Method: http.MethodGet, Path: searchPath("HP", at(10, 8, 0), at(11, 8, 0), "limit", tc.limit)})
			if r.Status != http.StatusOK || string(r.Body) != tc.want || r.Header.Get("Content-Type") != "application/json" {
				t.Errorf("search limit %s: %d %s %q\nwant %q", tc.limit, r.Status, r.Header.Get("Content-Type"), r.Body, tc.want)
			}
		}
	}
	r := e.s.Do(apptest.Request{Method: http.MethodGet, Path: searchPath("HP", at(10, 8, 0), at(11, 8, 0), "after", fmt.Sprint(ids[2]))})
	if string(r.Body) != "{\"cars\":[]}\n" {
		t.Errorf("search past the last car: %q, want no cars", r.Body)
	}
}

// Pages are put together in buffers used again by later searches: pages
// of different sizes asked for at once each come out whole and alone, as
// the same search asked alone gives it.
func TestSearchPagesAskedAtOnceComeOutWhole(t *testing.T) {
	t.Parallel()
	e := start(t)
	for range 3 {
		e.listCar("HP", "1h")
	}
	path := func(limit int) string {
		return searchPath("HP", at(10, 8, 0), at(11, 8, 0), "limit", fmt.Sprint(limit))
	}
	want := map[int]string{}
	for limit := 1; limit <= 3; limit++ {
		want[limit] = string(e.s.Do(apptest.Request{Method: http.MethodGet, Path: path(limit)}).Body)
	}
	const goroutines, each = 24, 15
	bad := make(chan string, goroutines*each)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range each {
				limit := (g+i)%3 + 1
				r := e.s.Do(apptest.Request{Method: http.MethodGet, Path: path(limit)})
				if got := string(r.Body); r.Status != http.StatusOK || got != want[limit] {
					bad <- fmt.Sprintf("limit %d: %d %q, want %q", limit, r.Status, got, want[limit])
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(bad)
	n := 0
	for b := range bad {
		if n++; n <= 3 {
			t.Error(b)
		}
	}
	if n > 0 {
		t.Errorf("%d of %d pages came out wrong", n, goroutines*each)
	}
}
