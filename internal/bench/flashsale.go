package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"berth.dev/berth/internal/auth"
)

// flashSale is the flash-sale scenario: Flights flights of 180 seats go on
// sale at once; customers arrive at the offered rate, mostly for the few
// most popular flights, hold seats or a quantity, and some pay.
type flashSale struct {
	o       *Options
	srv     *server
	c       *client
	loop    *openLoop
	flights []int64
	pop     popularity
	// pay and waitingRoom say whether this build offers payments and the
	// waiting room (set up by the caller after probing).
	pay, waitingRoom bool
	pollEvery        time.Duration
	customers        *tokenBook // hold i is customer saleCustomers+i's
}

// setupSale creates the sale's flights and, in protected mode with the
// option set, switches their waiting rooms on. features records what the
// build could do.
func setupSale(ctx context.Context, o *Options, c *client, srv *server, protect bool, features map[string]string) ([]int64, error) {
	flights := make([]int64, 0, o.Flights)
	for range o.Flights {
		id, err := createSaleFlight(ctx, c, srv)
		if err != nil {
			return nil, err
		}
		flights = append(flights, id)
	}
	switch {
	case o.WaitingRoom == 0:
		features["waitingRoom"] = "off (--waiting-room 0)"
	case !protect:
		features["waitingRoom"] = "off (bare design)"
	default:
		features["waitingRoom"] = fmt.Sprintf("on, admitting %d/s per flight", o.WaitingRoom)
		for _, id := range flights {
			if err := enableWaitingRoom(ctx, c, srv, id, o.WaitingRoom); err != nil {
				var se *statusError
				if errors.As(err, &se) && se.missingRoute() {
					features["waitingRoom"] = "unavailable in this build: " + se.Error()
					break
				}
				return nil, fmt.Errorf("switch the waiting room on: %w", err)
			}
		}
	}
	return flights, nil
}

// probePayments holds a seat and pays for it once, to learn whether this
// build takes payments (docs/api.md: POST /bookings/{id}/payments).
func probePayments(ctx context.Context, c *client, srv *server, flightID int64) (string, bool, error) {
	tok := srv.token(auth.Customer, setupCustomer)
	body, _ := json.Marshal(holdBody{FlightID: flightID, FareClass: "ECONOMY", Quantity: 1})
	b, err := c.must(ctx, call{method: http.MethodPost, url: srv.url + "/bookings", token: tok, body: body}, http.StatusCreated)
	if err != nil {
		return "", false, fmt.Errorf("hold for the payment probe: %w", err)
	}
	_, err = c.must(ctx, call{method: http.MethodPost, url: fmt.Sprintf("%s/bookings/%d/payments", srv.url, b.BookingID),
		token: tok, body: []byte(`{}`), header: map[string]string{"Idempotency-Key": "bench-probe-" + randomHex(8)}}, http.StatusCreated)
	var se *statusError
	switch {
	case err == nil:
		return "on", true, nil
	case errors.As(err, &se) && se.missingRoute():
		return "unavailable in this build: " + se.Error(), false, nil
	}
	return "", false, fmt.Errorf("payment probe: %w", err)
}

// hold is scheduled request i: customer saleCustomers+i asks for a hold.
func (f *flashSale) hold(ctx context.Context, i int64, sched time.Time) {
	rng := rand.New(rand.NewPCG(f.o.Seed, uint64(i)))
	req := saleHold(rng, f.flights, f.pop, f.o.SeatShare)
	pays := rng.Float64() < f.o.PayShare
	body, _ := json.Marshal(req)
	tok := f.customers.of(i)
	base := f.srv.at(i) // the customer's later requests go to the same berth
	a := f.loop.timed(ctx, "hold", sched, call{method: http.MethodPost, url: base + "/bookings", token: tok, body: body, decode: true})
	switch {
	case a.status == http.StatusCreated && pays && f.pay:
		f.loop.follow("pay", func() { f.payFor(ctx, base, tok, a.fields.BookingID) })
	case a.status == http.StatusTooManyRequests && a.fields.Code == "waiting_room" && f.waitingRoom:
		ticket := a.fields.ticket()
		f.loop.follow("journey", func() { f.wait(ctx, base, tok, body, ticket, pays, sched) })
	}
}

// payFor starts paying for a booking, with an Idempotency-Key of its own,
// then pays on the gateway's checkout page, so that the gateway sends
// berth its webhook as it would in a real sale.
func (f *flashSale) payFor(ctx context.Context, base, tok string, bookingID int64) {
	a := f.loop.timed(ctx, "pay", time.Now(), call{method: http.MethodPost, url: fmt.Sprintf("%s/bookings/%d/payments", base, bookingID),
		token: tok, body: []byte(`{}`), decode: true, header: map[string]string{"Idempotency-Key": "bench-" + randomHex(12)}})
	if a.status == http.StatusCreated && strings.HasPrefix(a.fields.CheckoutURL, "http") {
		f.loop.timed(ctx, "checkout", time.Now(), call{method: http.MethodPost, url: a.fields.CheckoutURL + "/pay"})
	}
}

// wait is a customer sent to the waiting room: it polls its ticket until
// admitted (or WaitMax passes), then holds again with the admission token.
// The journey's outcome is the retried hold's, or "gave up"; its latency
// counts from the customer's first request.
func (f *flashSale) wait(ctx context.Context, base, tok string, body []byte, ticket string, pays bool, since time.Time) {
	giveUp := earlier(time.Now().Add(f.o.WaitMax), f.loop.deadline)
	pollURL := base + "/waiting-room/" + url.PathEscape(ticket)
	journey := func(outcome string) {
		now := time.Now()
		f.loop.rec.done("journey", outcome, now.Sub(since), now)
	}
	for {
		sleepUntil(ctx, time.Now().Add(f.pollEvery))
		if ctx.Err() != nil || !time.Now().Before(giveUp) {
			journey("gave up")
			return
		}
		a := f.loop.timed(ctx, "poll", time.Now(), call{method: http.MethodGet, url: pollURL, token: tok, decode: true})
		switch {
		case a.status == http.StatusOK && a.fields.Admitted && a.fields.Token != "":
			r := f.loop.timed(ctx, "hold-retry", time.Now(), call{method: http.MethodPost, url: base + "/bookings",
				token: tok, body: body, decode: true, header: map[string]string{"Waiting-Room-Token": a.fields.Token}})
			journey(r.outcome())
			if r.status == http.StatusCreated && pays && f.pay {
				f.payFor(ctx, base, tok, r.fields.BookingID)
			}
			return
		case a.status == http.StatusOK, a.status == http.StatusTooManyRequests, a.status == http.StatusServiceUnavailable:
			// still queued, or asked to slow down: poll again
		default:
			journey("poll " + a.outcome())
			return
		}
	}
}
