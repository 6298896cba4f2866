package httpapi_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/httpapi"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paytest"
)

// viewsBundle is a berth with the OpenAPI document every answer is held
// to.
type viewsBundle struct {
	t   *testing.T
	s   *apptest.Server
	doc *apiDoc
}

func newViews(t *testing.T, o apptest.Options) *viewsBundle {
	t.Helper()
	s := apptest.Start(t, o)
	_, doc := fetchOpenAPI(t, s)
	return &viewsBundle{t: t, s: s, doc: doc}
}

// do sends req as role sub ("" for no token), checks the answer against
// the document's operation at path, and that its status is want.
func (v *viewsBundle) do(want int, path, method, uri, role string, sub int64) *apptest.Response {
	v.t.Helper()
	req := apptest.Request{Method: method, Path: uri}
	if role != "" {
		req.Token = v.s.Token(role, sub)
	}
	r := v.s.Do(req)
	for _, p := range conform(v.doc.raw, method, path, r) {
		v.t.Errorf("%s %s → %d %s: %s", method, uri, r.Status, r.Body, p)
	}
	if r.Status != want {
		v.t.Errorf("%s %s as %s %d: %d %s, want %d", method, uri, role, sub, r.Status, r.Body, want)
	}
	return r
}

func TestAirportsAndCities(t *testing.T) {
	t.Parallel()
	v := newViews(t, apptest.Options{})
	r := v.do(200, "/airports", "GET", "/airports", "", 0)
	if !strings.Contains(string(r.Body), `{"code":"SGN","name":"Tan Son Nhat International","city":"Ho Chi Minh City","country":"VN","timeZone":"Asia/Ho_Chi_Minh"}`) {
		t.Errorf("airports %.300s…: want SGN with its zone", r.Body)
	}
	if cc := r.Header.Get("Cache-Control"); cc != "public, max-age=3600" {
		t.Errorf("Cache-Control %q", cc)
	}
	r = v.do(200, "/cities", "GET", "/cities", "", 0)
	if !strings.Contains(string(r.Body), `{"code":"HN","name":"Hanoi","timeZone":"Asia/Ho_Chi_Minh"}`) {
		t.Errorf("cities %s: want Hanoi with its zone", r.Body)
	}
}

// Without a date, a search lists the next seven days; a flight that has
// departed is never listed, with a date or without.
func TestSearchWithoutDate(t *testing.T) {
	t.Parallel()
	v := newViews(t, apptest.Options{})
	now := v.s.Clock.Now()
	fare := apptest.Fare{Class: "ECONOMY", Price: 100, Seats: apptest.Seats(1, 1, "AB")}
	soon := apptest.CreateFlight(t, v.s.URL, v.s.Token(auth.Admin, 1), now.Add(2*time.Hour), fare)
	week := apptest.CreateFlight(t, v.s.URL, v.s.Token(auth.Admin, 1), now.Add(6*24*time.Hour), fare)
	later := apptest.CreateFlight(t, v.s.URL, v.s.Token(auth.Admin, 1), now.Add(8*24*time.Hour), fare)
	ids := func(uri string) string {
		t.Helper()
		var out struct {
			Flights []struct{ ID int64 } `json:"flights"`
		}
		v.do(200, "/flights", "GET", uri, "", 0).JSON(t, &out)
		var s []string
		for _, f := range out.Flights {
			s = append(s, fmt.Sprint(f.ID))
		}
		return strings.Join(s, ",")
	}
	if got, want := ids("/flights?from=SGN&to=HAN"), fmt.Sprintf("%d,%d", soon, week); got != want {
		t.Errorf("next 7 days: %s, want %s (not %d, 8 days ahead)", got, want, later)
	}
	v.s.Clock.Advance(3 * time.Hour) // the first one has departed
	time.Sleep(10 * time.Millisecond)
	if got := ids("/flights?from=SGN&to=HAN&date=" + now.Add(2*time.Hour).In(time.FixedZone("", 7*3600)).Format(time.DateOnly)); strings.Contains(got, fmt.Sprint(soon)) {
		t.Errorf("search by date lists the departed flight %d: %s", soon, got)
	}
	if got := ids("/flights?from=SGN&to=HAN"); got != fmt.Sprint(week) {
		t.Errorf("after the first departed: %s, want %d", got, week)
	}
	v.do(422, "/flights", "GET", "/flights?from=SGN&to=HAN&date=", "", 0)
	// Asked for by id, the departed flight is still there, with nothing
	// available; the one to come still has its seats.
	for id, want := range map[int64]string{soon: `"available":0`, week: `"available":2`} {
		if r := v.do(200, "/flights/{id}", "GET", fmt.Sprintf("/flights/%d", id), "", 0); !strings.Contains(string(r.Body), want) {
			t.Errorf("GET /flights/%d: %s, want %s", id, r.Body, want)
		}
	}
	// Its seat map says it has departed (its free seats still read
	// AVAILABLE, the one word the statuses have for them); a hold is refused.
	for id, want := range map[int64]bool{soon: true, week: false} {
		r := v.do(200, "/flights/{id}/seats", "GET", fmt.Sprintf("/flights/%d/seats", id), "", 0)
		if !strings.Contains(string(r.Body), fmt.Sprintf(`"departed":%t`, want)) {
			t.Errorf("seat map of flight %d: %s, want departed %t", id, r.Body, want)
		}
	}
	if _, p := v.s.Customer(7).TryHoldSeats(t, soon, "ECONOMY", "1A"); !p.Is(422, "validation_failed") {
		t.Errorf("hold on the departed flight: %+v, want 422 validation_failed", p)
	}
}

// GET /host/cars and /host/bookings: a host sees their own, an admin all,
// a customer nothing (403); pages and filters.
func TestHostViews(t *testing.T) {
	t.Parallel()
	v := newViews(t, apptest.Options{})
	car := func(host int64, plate string) int64 {
		return v.s.Host(host).CreateCar(t, apptest.Car{Plate: plate, Model: "Kia Morning", City: "HN", DailyPrice: 600000,
			Deposit: 3000000, Currency: "VND"}).ID
	}
	mine1, mine2, theirs := car(50, "30A-000.01"), car(50, "30A-000.02"), car(51, "30A-000.03")
	hold := func(customer, car int64, days int) int64 {
		from := v.s.Clock.Now().Add(time.Duration(days) * 24 * time.Hour)
		return v.s.Customer(customer).HoldCar(t, car, from, from.Add(24*time.Hour)).BookingID
	}
	b1, b2, b3 := hold(7, mine1, 5), hold(8, mine2, 5), hold(9, theirs, 5)
	v.s.Customer(8).Cancel(t, b2)

	// The ids of a page of cars or bookings, as the document describes it
	// (v.do holds the answer to it).
	list := func(path, uri, role string, sub int64) string {
		t.Helper()
		var out struct {
			Cars     []httpapi.CarView `json:"cars"`
			Bookings []booking.View    `json:"bookings"`
		}
		v.do(200, path, "GET", uri, role, sub).JSON(t, &out)
		var s []string
		for _, c := range out.Cars {
			s = append(s, fmt.Sprint(c.ID))
		}
		for _, b := range out.Bookings {
			s = append(s, fmt.Sprint(b.BookingID))
		}
		return strings.Join(s, ",")
	}
	if got, want := list("/host/cars", "/host/cars", auth.Host, 50), fmt.Sprintf("%d,%d", mine1, mine2); got != want {
		t.Errorf("host 50's cars: %s, want %s", got, want)
	}
	if got, want := list("/host/cars", "/host/cars", auth.Admin, 1), fmt.Sprintf("%d,%d,%d", mine1, mine2, theirs); got != want {
		t.Errorf("admin's cars: %s, want %s", got, want)
	}
	var page apptest.CarPage
	v.do(200, "/host/cars", "GET", "/host/cars?limit=1", auth.Host, 50).JSON(t, &page)
	if page.NextAfter != mine1 {
		t.Errorf("first page of one: nextAfter %d, want %d", page.NextAfter, mine1)
	}
	if got := list("/host/cars", "/host/cars", auth.Host, 52); got != "" {
		t.Errorf("a host without cars sees %s", got)
	}
	if got, want := list("/host/bookings", "/host/bookings", auth.Host, 50), fmt.Sprintf("%d,%d", b2, b1); got != want {
		t.Errorf("host 50's bookings: %s, want %s (newest first, not %d)", got, want, b3)
	}
	if got := list("/host/bookings", "/host/bookings?status=cancelled", auth.Host, 50); got != fmt.Sprint(b2) {
		t.Errorf("cancelled: %s, want %d", got, b2)
	}
	if got := list("/host/bookings", fmt.Sprintf("/host/bookings?carId=%d", mine1), auth.Host, 50); got != fmt.Sprint(b1) {
		t.Errorf("car %d: %s, want %d", mine1, got, b1)
	}
	// An id past int4 is no car of anyone's: none of its bookings, not a 500.
	for _, id := range []int64{1 << 31, 1<<63 - 1} {
		if got := list("/host/bookings", fmt.Sprintf("/host/bookings?carId=%d", id), auth.Host, 50); got != "" {
			t.Errorf("car %d: %s, want none", id, got)
		}
	}
	if got := list("/host/bookings", fmt.Sprintf("/host/bookings?limit=1&before=%d", b3), auth.Admin, 1); got != fmt.Sprint(b2) {
		t.Errorf("admin, one before %d: %s, want %d", b3, got, b2)
	}
	for _, c := range []struct {
		path, uri string
		status    int
		role      string
	}{
		{"/host/cars", "/host/cars", 403, auth.Customer},
		{"/host/cars", "/host/cars", 401, ""},
		{"/host/cars", "/host/cars?limit=0", 422, auth.Host},
		{"/host/cars", "/host/cars?after=x", 422, auth.Host},
		{"/host/bookings", "/host/bookings", 403, auth.Customer},
		{"/host/bookings", "/host/bookings?status=LOST", 422, auth.Host},
		{"/host/bookings", "/host/bookings?carId=0", 422, auth.Host},
		{"/host/bookings", "/host/bookings?limit=101", 422, auth.Host},
	} {
		v.do(c.status, c.path, "GET", c.uri, c.role, 50)
	}
}

// GET /admin/flights…: per class capacity, limit, sold, held, available,
// and the waiting room's state with the people queued.
func TestAdminFlights(t *testing.T) {
	t.Parallel()
	v := newViews(t, apptest.Options{})
	id := v.s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 100, Seats: apptest.Seats(1, 2, "ABC"), OverbookLimit: 1})
	other := apptest.CreateFlight(t, v.s.URL, v.s.Token(auth.Admin, 1), apptest.Epoch.Add(30*time.Hour), apptest.Fare{Class: "ECONOMY", Price: 100, Seats: apptest.Seats(1, 1, "A")})
	hold := v.s.Customer(7).HoldQuantity(t, id, "ECONOMY", 2)
	paid := paytest.Charge(t, v.s.App.Pool, hold.BookingID)
	paytest.Send(t, v.s.URL, v.s.Clock.Now(), payment.ChargeSucceeded, paid)
	v.s.Customer(8).HoldSeats(t, id, "ECONOMY", "2C")
	v.s.Admin().SetWaitingRoom(t, id, true, 5)
	if _, p := v.s.Customer(9).TryHoldQuantity(t, id, "ECONOMY", 1); p == nil || p.Code != "waiting_room" {
		t.Fatalf("hold in a surge: %v, want waiting_room", p)
	}

	one := v.do(200, "/admin/flights/{id}", "GET", fmt.Sprintf("/admin/flights/%d", id), auth.Admin, 1)
	want := `"fares":[{"fareClass":"ECONOMY","price":100,"currency":"VND","available":4,"capacity":6,"overbookLimit":1,"sold":2,"held":1,"buckets":1}],"waitingRoom":{"enabled":true,"admitPerSecond":5,"queued":1}}`
	if !strings.HasSuffix(strings.TrimSpace(string(one.Body)), want) {
		t.Errorf("admin flight %s\nwant it to end %s", one.Body, want)
	}
	// PATCH answers the flight as GET does: the room with its queue.
	patched := v.s.Admin().SetWaitingRoom(t, id, true, 7)
	if r := patched.WaitingRoom; !r.Enabled || r.AdmitPerSecond != 7 || r.Queued != 1 {
		t.Errorf("PATCH answered the room %+v, want enabled, 7 a second, 1 queued", r)
	}
	var list struct {
		Flights []struct {
			ID          int64 `json:"id"`
			WaitingRoom struct{ Enabled bool }
		} `json:"flights"`
	}
	v.do(200, "/admin/flights", "GET", "/admin/flights?from=sgn&to=HAN", auth.Admin, 1).JSON(t, &list)
	if len(list.Flights) != 2 || list.Flights[0].ID != other || list.Flights[1].ID != id || !list.Flights[1].WaitingRoom.Enabled || list.Flights[0].WaitingRoom.Enabled {
		t.Errorf("admin list %+v: want %d then %d (soonest first), only the second's room on", list.Flights, other, id)
	}
	v.do(200, "/admin/flights", "GET", "/admin/flights?date="+apptest.Epoch.Add(30*time.Hour).In(time.FixedZone("", 7*3600)).Format(time.DateOnly)+"&limit=1", auth.Admin, 1).JSON(t, &list)
	if len(list.Flights) != 1 || list.Flights[0].ID != other {
		t.Errorf("by date: %+v, want only %d", list.Flights, other)
	}
	for _, c := range []struct {
		path, uri, role string
		status          int
	}{
		{"/admin/flights", "/admin/flights?from=SG1", auth.Admin, 422},
		{"/admin/flights", "/admin/flights?date=soon", auth.Admin, 422},
		{"/admin/flights", "/admin/flights?limit=201", auth.Admin, 422},
		{"/admin/flights", "/admin/flights", auth.Host, 403},
		{"/admin/flights", "/admin/flights", "", 401},
		{"/admin/flights/{id}", "/admin/flights/99999", auth.Admin, 404},
		{"/admin/flights/{id}", fmt.Sprintf("/admin/flights/%d", id), auth.Customer, 403},
	} {
		v.do(c.status, c.path, "GET", c.uri, c.role, 1)
	}
}

// The refund quote is what the cancellation then refunds, for whoever may
// cancel; nobody else learns the booking exists.
func TestRefundQuote(t *testing.T) {
	t.Parallel()
	v := newViews(t, apptest.Options{})
	id := v.s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(1, 1, "AB")})
	hold := func(customer int64) int64 { return v.s.Customer(customer).HoldQuantity(t, id, "ECONOMY", 1).BookingID }
	held := hold(7)
	q := v.do(200, "/bookings/{id}/refund-quote", "GET", fmt.Sprintf("/bookings/%d/refund-quote", held), auth.Customer, 7).Map(t)
	if q["refundAmount"] != float64(0) || q["rule"] != "unpaid" {
		t.Errorf("HELD quote %v, want 0 by rule unpaid", q)
	}
	paid := hold(8)
	paytest.Send(t, v.s.URL, v.s.Clock.Now(), payment.ChargeSucceeded, paytest.Charge(t, v.s.App.Pool, paid))
	uri := fmt.Sprintf("/bookings/%d/refund-quote", paid)
	v.do(404, "/bookings/{id}/refund-quote", "GET", uri, auth.Customer, 7)
	v.do(401, "/bookings/{id}/refund-quote", "GET", uri, "", 0)
	v.do(404, "/bookings/{id}/refund-quote", "GET", "/bookings/x/refund-quote", auth.Customer, 8)
	admin := v.do(200, "/bookings/{id}/refund-quote", "GET", uri, auth.Admin, 1).Map(t)
	if admin["refundAmount"] != float64(1000) || admin["rule"] != "seller" || admin["cancelReason"] != "admin" {
		t.Errorf("admin's quote %v, want 1000 in full (seller)", admin)
	}
	// 48 h before departure the default rule refunds all; 20 h before, nothing.
	v.s.Clock.Advance(28 * time.Hour)
	q = v.do(200, "/bookings/{id}/refund-quote", "GET", uri, auth.Customer, 8).Map(t)
	if q["refundAmount"] != float64(0) || q["percent"] != float64(0) || q["rule"] != "policy" {
		t.Errorf("quote 20 h before departure %v, want 0 %% by policy", q)
	}
	// The tier: less than the 24 h the rule asks for, none below it.
	if _, ok := q["noticeAtLeast"]; ok || q["noticeLessThan"] != float64(24*3600) {
		t.Errorf("quote 20 h before departure %v, want noticeLessThan 86400 and no noticeAtLeast", q)
	}
	cancelled := v.s.Do(apptest.Request{Method: "POST", Path: fmt.Sprintf("/bookings/%d/cancel", paid), Token: v.s.Token(auth.Customer, 8)}).Map(t)
	if cancelled["refundAmount"] != q["refundAmount"] {
		t.Errorf("cancelled with refund %v, quoted %v", cancelled["refundAmount"], q["refundAmount"])
	}
	v.do(409, "/bookings/{id}/refund-quote", "GET", uri, auth.Customer, 8)

	ev := v.do(200, "/bookings/{id}/events", "GET", fmt.Sprintf("/bookings/%d/events", paid), auth.Customer, 8)
	var out struct {
		Events []struct{ Type string } `json:"events"`
	}
	ev.JSON(t, &out)
	var types []string
	for _, e := range out.Events {
		types = append(types, e.Type)
	}
	if got := strings.Join(types, ","); got != "booking.held,booking.confirmed,booking.cancelled" {
		t.Errorf("events %s, want held, confirmed, cancelled", got)
	}
	v.do(404, "/bookings/{id}/events", "GET", fmt.Sprintf("/bookings/%d/events", paid), auth.Customer, 7)
}

// The admin's event backlog and audit: the last audit is 404 until one
// runs, then what it found.
func TestAdminEventsAndAudit(t *testing.T) {
	t.Parallel()
	v := newViews(t, apptest.Options{})
	ev := v.do(200, "/admin/events", "GET", "/admin/events", auth.Admin, 1).Map(t)
	if cs, _ := ev["consumers"].([]any); len(cs) == 0 || !strings.Contains(fmt.Sprint(cs), "tickets") {
		t.Errorf("events %v: want the consumers, tickets among them", ev)
	}
	v.do(403, "/admin/events", "GET", "/admin/events", auth.Host, 1)
	none := v.do(200, "/admin/audit", "GET", "/admin/audit", auth.Admin, 1).Map(t)
	if none["ranAt"] != nil || none["ok"] != nil || len(none["results"].([]any)) != 0 {
		t.Errorf("before any audit: %v, want ranAt and ok null, no results", none)
	}
	run := v.do(200, "/admin/audit", "POST", "/admin/audit", auth.Admin, 1).Map(t)
	if run["ok"] != true || len(run["results"].([]any)) != 8 {
		t.Errorf("audit %v: want eight invariants, all holding", run)
	}
	last := v.do(200, "/admin/audit", "GET", "/admin/audit", auth.Admin, 1).Map(t)
	if last["ranAt"] != run["ranAt"] {
		t.Errorf("last audit ran at %v, want %v", last["ranAt"], run["ranAt"])
	}
	v.do(403, "/admin/audit", "POST", "/admin/audit", auth.Customer, 1)
	v.do(401, "/admin/audit", "GET", "/admin/audit", "", 0)
}

// The web app is served at / and every /app/ deep link, with its assets;
// /dev/login exists only in berth dev.
func TestWebAppServed(t *testing.T) {
	t.Parallel()
	v := newViews(t, apptest.Options{})
	for _, c := range []struct{ path, uri string }{{"/", "/"}, {"/app/", "/app/flights/12"}, {"/app/", "/app/admin"}} {
		r := v.do(200, c.path, "GET", c.uri, "", 0)
		if !strings.Contains(string(r.Body), `<script type="module" src="/assets/js/app.js">`) ||
			!strings.Contains(r.Header.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("GET %s: %s %q, want the app shell with its policy", c.uri, r.Header.Get("Content-Type"), r.Body[:min(len(r.Body), 80)])
		}
	}
	css := v.do(200, "/assets/", "GET", "/assets/app.css", "", 0)
	if css.Header.Get("Content-Type") != "text/css; charset=utf-8" || css.Header.Get("ETag") == "" {
		t.Errorf("app.css: %v", css.Header)
	}
	again := v.s.Do(apptest.Request{Method: "GET", Path: "/assets/app.css", Header: map[string]string{"If-None-Match": css.Header.Get("ETag")}})
	if again.Status != http.StatusNotModified {
		t.Errorf("revalidated: %d, want 304", again.Status)
	}
	v.do(404, "/assets/", "GET", "/assets/nope.js", "", 0)
	v.do(404, "/assets/", "GET", "/assets/index.html", "", 0)
	if r := v.s.Do(apptest.Request{Method: "GET", Path: "/dev/login?role=admin&sub=1"}); r.Status != 404 {
		t.Errorf("outside berth dev, /dev/login answers %d, want 404", r.Status)
	}

	dev := apptest.Start(t, apptest.Options{App: func(o *app.Options) { o.Dev = true }})
	r := dev.Do(apptest.Request{Method: "GET", Path: "/dev/login?role=host&sub=2001&next=//evil.example/"})
	body := string(r.Body)
	i := strings.Index(body, `name="berth-token" content="`)
	if r.Status != 200 || i < 0 || !strings.Contains(body, `name="berth-next" content="/app/host"`) {
		t.Fatalf("dev login: %d %s, want a token and the host's page (never another site)", r.Status, body)
	}
	tok := body[i+len(`name="berth-token" content="`):]
	tok = tok[:strings.IndexByte(tok, '"')]
	c, err := auth.Verify([]byte(apptest.AuthSecret), tok, dev.Clock.Now())
	if err != nil || c.Role != auth.Host || c.ID != 2001 {
		t.Errorf("dev token: %+v %v, want host 2001", c, err)
	}
	// The form's host is one with cars (the first car's), as berth dev
	// prints it.
	dev.Host(77).CreateCar(t, apptest.Car{Plate: "30A-777.77", Model: "Kia Morning", City: "HN", DailyPrice: 600000, Deposit: 3000000, Currency: "VND"})
	if r := dev.Do(apptest.Request{Method: "GET", Path: "/dev/login"}); !strings.Contains(string(r.Body), `href="/dev/login?role=host&amp;sub=77"`) {
		t.Errorf("the dev sign-in page offers no host with cars: %s", r.Body)
	}
	// next is a page of the app, or the role's home: never another site,
	// however a browser would read it (it drops tabs and line breaks).
	for next, want := range map[string]string{
		"/app/bookings/7?x=1": "/app/bookings/7?x=1", "/app/signin": "/app/signin", "/\t/evil.example": "/app/",
		"/\n/evil.example": "/app/", "/\r/evil.example": "/app/", "/app/\t/x": "/app/", "/app/%0A/x": "/app/%0A/x",
		"https://evil.example/app/": "/app/", "/app\\evil": "/app/",
		"/applesauce": "/app/", "/../app/": "/app/", "": "/app/",
	} {
		r := dev.Do(apptest.Request{Method: "GET", Path: "/dev/login?role=customer&sub=7&next=" + url.QueryEscape(next)})
		if got := string(r.Body); r.Status != 200 || !strings.Contains(got, `name="berth-next" content="`+html.EscapeString(want)+`"`) {
			t.Errorf("next=%q: %d, want next %s in %s", next, r.Status, want, got)
		}
	}
	for _, q := range []string{"role=root&sub=1", "role=customer&sub=0", "role=customer", "role=customer&sub=9007199254740992"} {
		if r := dev.Do(apptest.Request{Method: "GET", Path: "/dev/login?" + q}); r.Status != 422 {
			t.Errorf("/dev/login?%s: %d, want 422", q, r.Status)
		}
	}
	if r := dev.Do(apptest.Request{Method: "GET", Path: "/dev/login"}); r.Status != 200 || !strings.Contains(string(r.Body), "<form") {
		t.Errorf("/dev/login without a user: %d, want the form", r.Status)
	}
}

// What a token reads is that caller's own and is never kept by a shared
// cache: every authenticated GET answers Cache-Control: no-store, whatever
// its handler; public reads say how long they may be kept.
func TestPersonalAnswersAreNeverCached(t *testing.T) {
	t.Parallel()
	v := newViews(t, apptest.Options{})
	flightID := v.s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 100, Seats: apptest.Seats(1, 1, "AB")})
	b := v.s.Customer(7).HoldSeats(t, flightID, "ECONOMY", "1A")
	for _, c := range []struct{ role, uri string }{
		{auth.Customer, fmt.Sprintf("/bookings/%d", b.BookingID)},
		{auth.Customer, "/bookings"},
		{auth.Customer, fmt.Sprintf("/bookings/%d/refund-quote", b.BookingID)},
		{auth.Customer, fmt.Sprintf("/bookings/%d/events", b.BookingID)},
		{auth.Customer, "/waitlist"},
		{auth.Host, "/host/cars"},
		{auth.Admin, fmt.Sprintf("/admin/flights/%d", flightID)},
	} {
		r := v.s.Do(apptest.Request{Method: http.MethodGet, Path: c.uri, Token: v.s.Token(c.role, 7)})
		if r.Status != http.StatusOK || r.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s as %s: %d, Cache-Control %q; want 200 and no-store", c.uri, c.role, r.Status, r.Header.Get("Cache-Control"))
		}
	}
	r := v.s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/flights/%d/seats", flightID)})
	if cc := r.Header.Get("Cache-Control"); !strings.HasPrefix(cc, "public") {
		t.Errorf("GET /flights/%d/seats: Cache-Control %q, want public", flightID, cc)
	}
}

// Every event GET /bookings/{id}/events serves is documented, refund
// events too: a booking paid, cancelled with a refund, paid again (stray
// money), both refunds completed, and an event of an earlier release whose
// data is the refund itself. Each current event's data is the booking
// (bookingId, status, version), a refund event's with its refund.
func TestBookingEventsWithRefundsAreDocumented(t *testing.T) {
	t.Parallel()
	v := newViews(t, apptest.Options{Config: func(c *config.Config) { c.Events.InServe = false }})
	pool := v.s.App.Pool
	id := v.s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(1, 1, "AB")})
	b := v.s.Customer(8).HoldQuantity(t, id, "ECONOMY", 1).BookingID
	paytest.Send(t, v.s.URL, v.s.Clock.Now(), payment.ChargeSucceeded, paytest.Charge(t, pool, b))
	v.s.Customer(8).Cancel(t, b)
	stray := paytest.Foreign(t, pool, b)
	paytest.Send(t, v.s.URL, v.s.Clock.Now(), payment.ChargeSucceeded, stray)
	relay := &paytest.Relay{Pool: pool, Consumer: v.s.App.Refunds}
	apptest.Eventually(t, 30*time.Second, "both refunds completed", func() bool {
		if _, errs := relay.Drain(t.Context()); len(errs) > 0 {
			t.Logf("refunds: %v", errs)
		}
		if err := v.s.App.PaySim.Idle(t.Context()); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox WHERE booking_id = $1 AND type = 'refund.completed'`, b).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 2
	})
	// As an earlier release wrote it: the refund as the whole data.
	if _, err := pool.Exec(t.Context(), `INSERT INTO outbox (booking_id, type, payload, created_at)
		VALUES ($1, 'refund.requested', jsonb_build_object('bookingId', $1::bigint, 'amount', 1, 'currency', 'VND', 'reason', 'late', 'providerTxnId', 'txn_old'), $2)`,
		b, v.s.Clock.Now()); err != nil {
		t.Fatal(err)
	}

	r := v.do(200, "/bookings/{id}/events", "GET", fmt.Sprintf("/bookings/%d/events", b), auth.Customer, 8)
	var out struct {
		Events []struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		} `json:"events"`
	}
	r.JSON(t, &out)
	var types []string
	for i, e := range out.Events {
		types = append(types, e.Type)
		if i == len(out.Events)-1 {
			break // the earlier release's
		}
		d := e.Data
		if d["bookingId"] != float64(b) || d["status"] == nil || d["version"] == nil || d["amount"] != float64(1000) {
			t.Errorf("event %d (%s): data %v, want booking %d with its status, version and amount 1000", i, e.Type, d, b)
		}
		refund, _ := d["refund"].(map[string]any)
		if strings.HasPrefix(e.Type, "refund.") != (refund != nil) || refund != nil && refund["amount"] == nil {
			t.Errorf("event %d (%s): refund %v, want one with its amount exactly in refund events", i, e.Type, d["refund"])
		}
	}
	if got, want := strings.Join(types, ","), "booking.held,booking.confirmed,booking.cancelled,refund.requested,refund.requested,refund.completed,refund.completed,refund.requested"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
}
