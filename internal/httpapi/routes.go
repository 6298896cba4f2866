package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/guard"
	"berth.dev/berth/internal/idempotency"
)

// Idempotency says whether a route takes an Idempotency-Key header
// (docs/api.md, "Idempotency").
type Idempotency int

const (
	// NoKey: the route ignores the header.
	NoKey Idempotency = iota
	// KeyOptional: with the header, the route runs once per caller and key.
	KeyOptional
	// KeyRequired: as KeyOptional, and a request without the header is 400.
	KeyRequired
)

// String names i as the OpenAPI document's parameter does.
func (i Idempotency) String() string {
	switch i {
	case KeyOptional:
		return "optional"
	case KeyRequired:
		return "required"
	}
	return "none"
}

// Route is one route the server serves: a line of its route table.
type Route struct {
	// Method is the pattern's method ("GET", "POST", …).
	Method string
	// Path is the pattern's path, with its {wildcards}; a path ending in
	// "/" (other than "/" itself, the exact root) is a subtree.
	Path string
	// Roles are the roles a bearer token needs; nil for a route without
	// authentication (public, or signed like the payment webhook).
	Roles []string
	// Lane is the route's concurrency class in the surge layers: LaneNone
	// is never limited nor shed (probes, metrics, the gateway's webhook),
	// LaneMoney waits its turn rather than being shed.
	Lane guard.Lane
	// Idempotency says whether the route takes an Idempotency-Key.
	Idempotency Idempotency
	// Bodiless says that the route acts on its path alone and refuses a
	// body (400 invalid_request; 413 body_too_large past the cap).
	Bodiless bool
}

// Pattern returns r as written on the mux: "GET /flights/{id}".
func (r Route) Pattern() string {
	path := r.Path
	if path == "/" {
		path = "/{$}"
	}
	return r.Method + " " + path
}

// entry is a Route with its handler.
type entry struct {
	Route
	h handlerFunc
	// keyInEffect: the route's only effect is a hold sent through
	// booking.QueryHold, which claims the Idempotency-Key itself
	// (Server.runPending).
	keyInEffect bool
	// keyLease, when not zero, is how long a request keeps its
	// Idempotency-Key while it runs (idempotency.Request.Lease).
	keyLease time.Duration
}

// claimsKeyInHold returns e with keyInEffect set, and the short lease of a
// hold (idempotency.ShortLease): its effect commits with the hold, so a
// retry after the lease finds the booking the first run made.
func (e entry) claimsKeyInHold() entry {
	e.keyInEffect, e.keyLease = true, idempotency.ShortLease
	return e
}

// idempotentByItself returns e with the short lease of a route that a
// retry may run again harmlessly (idempotency.ShortLease): a retry of a
// request whose process died is not kept waiting a minute.
func (e entry) idempotentByItself() entry {
	e.keyLease = idempotency.ShortLease
	return e
}

// takesNoBody returns e with Bodiless set.
func (e entry) takesNoBody() entry {
	e.Bodiless = true
	return e
}

// route makes a line of the table from a mux pattern.
func route(pattern string, who access, lane guard.Lane, idem Idempotency, h handlerFunc) entry {
	method, path, _ := strings.Cut(pattern, " ")
	// "{$}" only tells the mux that "/" is exact, not a subtree; the
	// route's path is "/".
	if path == "/{$}" {
		path = "/"
	}
	return entry{Route: Route{Method: method, Path: path, Roles: who, Lane: lane, Idempotency: idem}, h: h}
}

// The lanes of the table, short.
const (
	none  = guard.LaneNone
	hold  = guard.LaneHold
	read  = guard.LaneRead
	money = guard.LaneMoney
	other = guard.LaneOther
	room  = guard.LaneRoom
)

// table is every route the server serves (docs/api.md): who may call it,
// its lane in the surge layers, whether it takes an Idempotency-Key, and
// its handler. The router registers exactly these; GET /openapi.yaml must
// describe exactly these (Routes, and the test that holds it to them).
//
// Lanes: probes, metrics and the gateway's webhook are never limited nor
// shed (money from the gateway is signed, comes at its pace, and a delay
// could let a paid hold expire); payment starts and cancellations are
// money, which a burst of holds never sheds; the waiting room's polls only
// ask Redis (limited per client, no concurrency slot); public reads share
// at most half the pool.
func (s *Server) table() []entry {
	t := []entry{
		route("GET /healthz", public, none, NoKey, s.healthz),
		route("GET /readyz", public, none, NoKey, s.readyz),
		route("GET /metrics", public, none, NoKey, serve(&scrapes{reg: s.Registry})),
		route("GET /openapi.yaml", public, read, NoKey, s.openAPI),

		route("GET /flights", public, read, NoKey, s.searchFlights),
		route("GET /flights/{id}", public, read, NoKey, s.getFlight),
		route("GET /flights/{id}/seats", public, read, NoKey, s.seatMap),
		route("POST /admin/flights", roles(auth.Admin), other, NoKey, s.createFlight),
		route("PATCH /admin/flights/{id}", roles(auth.Admin), other, NoKey, s.patchFlight),
		route("PATCH /admin/flights/{id}/fares/{fareClass}", roles(auth.Admin), other, NoKey, s.patchFare),

		// A flight or a car hold; a car booking requires the key (createCarBooking).
		route("POST /bookings", roles(auth.Customer), hold, KeyOptional, s.createBooking).claimsKeyInHold(),
		route("GET /bookings", anyRole, other, NoKey, s.listBookings),
		route("GET /bookings/{id}", anyRole, other, NoKey, s.getBooking),
		route("DELETE /bookings/{id}", anyRole, money, NoKey, s.cancelBooking).takesNoBody(),
		route("POST /bookings/{id}/cancel", anyRole, money, NoKey, s.cancelBooking).takesNoBody(),
		route("POST /bookings/{id}/extend", roles(auth.Customer), other, NoKey, s.extendBooking).takesNoBody(),
		route("POST /bookings/{id}/seats", roles(auth.Customer), other, NoKey, s.assignSeats),
		route("GET /bookings/{id}/refund-quote", anyRole, other, NoKey, s.refundQuote),
		route("GET /bookings/{id}/events", anyRole, other, NoKey, s.bookingEvents),
		route("POST /flights/{id}/waitlist", roles(auth.Customer), other, NoKey, s.joinWaitlist),
		route("GET /waitlist", roles(auth.Customer), other, NoKey, s.listWaitlist),
		route("DELETE /waitlist/{id}", roles(auth.Customer), other, NoKey, s.leaveWaitlist).takesNoBody(),

		// A payment start resumes its booking's one charge, whatever key
		// it comes with: its key has the short lease.
		route("POST /bookings/{id}/payments", roles(auth.Customer), money, KeyRequired, s.startPayment).takesNoBody().idempotentByItself(),
		route("POST /payments/webhook", public, none, NoKey, s.paymentWebhook),

		route("GET /cars", public, read, NoKey, s.searchCars),
		route("GET /cars/{id}", public, read, NoKey, s.getCar),
		route("GET /cars/{id}/calendar", public, read, NoKey, s.carCalendar),
		route("POST /host/cars", roles(auth.Host, auth.Admin), other, NoKey, s.createCar),
		// Only the car's host or an admin hands cars over; a customer is
		// refused by role before anything is looked up.
		route("POST /bookings/{id}/pickup", roles(auth.Host, auth.Admin), other, NoKey, s.moveCarBooking(booking.Confirmed, booking.OnTrip)).takesNoBody(),
		route("POST /bookings/{id}/return", roles(auth.Host, auth.Admin), other, NoKey, s.moveCarBooking(booking.OnTrip, booking.Completed)).takesNoBody(),

		route("GET /waiting-room/{ticket}", roles(auth.Customer), room, NoKey, s.waitingRoom),

		// The web app's reads and the host and operator views.
		route("GET /airports", public, read, NoKey, s.airports),
		route("GET /cities", public, read, NoKey, s.cities),
		route("GET /host/cars", roles(auth.Host, auth.Admin), other, NoKey, s.hostCars),
		route("GET /host/bookings", roles(auth.Host, auth.Admin), other, NoKey, s.hostBookings),
		route("GET /admin/flights", roles(auth.Admin), other, NoKey, s.adminFlights),
		route("GET /admin/flights/{id}", roles(auth.Admin), other, NoKey, s.adminFlight),
		route("GET /admin/events", roles(auth.Admin), other, NoKey, s.adminEvents),
		route("GET /admin/audit", roles(auth.Admin), other, NoKey, s.lastAudit),
		route("POST /admin/audit", roles(auth.Admin), other, NoKey, s.runAudit).takesNoBody(),

		// The web app: its shell at / and at every /app/... deep link (the
		// app routes in the browser), and its assets.
		route("GET /{$}", public, read, NoKey, s.appShell),
		route("GET /app/", public, read, NoKey, s.appShell),
		route("GET /assets/", public, read, NoKey, s.asset),
	}
	if s.PaySim != nil {
		// The built-in gateway simulator's checkout pages, behind the same
		// limits and shedding as every route (by client address).
		sim := serve(http.StripPrefix("/paysim", s.PaySim))
		t = append(t,
			route("GET /paysim/checkout/{txn}", public, read, NoKey, sim),
			route("POST /paysim/checkout/{txn}/{action}", public, other, NoKey, sim))
	}
	if s.Dev {
		// Signs a browser in as anyone: `berth dev` only.
		t = append(t, route("GET /dev/login", public, read, NoKey, s.devLogin))
	}
	return t
}

// serve makes a handlerFunc of an http.Handler.
func serve(h http.Handler) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
		h.ServeHTTP(w, r)
		return nil
	}
}

// Routes returns every route the server serves, sorted by path then
// method: the list the OpenAPI document (GET /openapi.yaml) must describe,
// and the test holds it to.
func (s *Server) Routes() []Route {
	out := make([]Route, 0, len(s.routes))
	for _, r := range s.routes {
		r.Roles = slices.Clone(r.Roles)
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Route) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
	return out
}
