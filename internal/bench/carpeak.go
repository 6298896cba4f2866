package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"

	"berth.dev/berth/internal/auth"
)

// ErrUnavailable marks a scenario this build of berth cannot run: a route
// it needs answered 404 or 405.
var ErrUnavailable = errors.New("not available in this build of berth")

// carCities are where the cars of the peak are.
var carCities = []string{"HN", "HCM", "DN"}

// carPeak is the car-peak scenario: a few hundred popular cars, searched
// thousands of times a second over a handful of popular periods, and held
// hundreds of times a second.
type carPeak struct {
	o         *Options
	srv       *server
	loop      *openLoop
	cars      []int64
	pop       popularity
	base      time.Time // first pickup day, 09:00 in Vietnam
	periods   [][2]time.Time
	customers *tokenBook // hold i is customer saleCustomers+i's
}

// setupCars lists the cars through the host API, a few at a time.
func setupCars(ctx context.Context, o *Options, c *client, srv *server) ([]int64, error) {
	tok := srv.token(auth.Host, hostID)
	ids := make([]int64, o.Cars)
	errs := make([]error, o.Cars)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for k := range o.Cars {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			body, _ := json.Marshal(map[string]any{
				"plate": fmt.Sprintf("BB-%05d", k+1), "model": "VinFast VF8", "city": carCities[k%len(carCities)],
				"dailyPrice": 800_000, "deposit": 2_000_000, "currency": "VND", "turnaround": "2h",
			})
			f, err := c.must(ctx, call{method: http.MethodPost, url: srv.url + "/host/cars", token: tok, body: body}, http.StatusCreated)
			ids[k], errs[k] = f.ID, err
		})
	}
	wg.Wait()
	for _, err := range errs {
		var se *statusError
		if errors.As(err, &se) && se.missingRoute() {
			return nil, fmt.Errorf("car-peak needs the car API: %w (%w)", ErrUnavailable, err)
		}
		if err != nil {
			return nil, fmt.Errorf("list a car: %w", err)
		}
	}
	return ids, nil
}

func newCarPeak(o *Options, srv *server, cars []int64) *carPeak {
	vn := time.FixedZone("+07:00", 7*3600)
	now := time.Now().In(vn)
	base := time.Date(now.Year(), now.Month(), now.Day(), 9, 0, 0, 0, vn).AddDate(0, 0, 7)
	p := &carPeak{o: o, srv: srv, cars: cars, pop: newPopularity(len(cars), o.Zipf), base: base,
		customers: srv.tokenBook(saleCustomers, scheduledCount(o.CarHoldRate, o.Duration))}
	// The popular searches: the next weekends and a few weeks, so that
	// many customers ask the same question, as they do before a holiday.
	for k := range 8 {
		from := base.AddDate(0, 0, 3*k)
		p.periods = append(p.periods, [2]time.Time{from, from.AddDate(0, 0, 2+k%3)})
	}
	return p
}

// search is scheduled search i.
func (p *carPeak) search(ctx context.Context, i int64, sched time.Time) {
	rng := rand.New(rand.NewPCG(p.o.Seed^0x5ea, uint64(i)))
	per := p.periods[rng.IntN(len(p.periods))]
	q := url.Values{"city": {carCities[rng.IntN(len(carCities))]},
		"from": {per[0].Format(time.RFC3339)}, "to": {per[1].Format(time.RFC3339)}}
	p.loop.timed(ctx, "search", sched, call{method: http.MethodGet, url: p.srv.at(i) + "/cars?" + q.Encode()})
}

// uncachedSearch is scheduled uncached search i: a popular period, but
// ending i seconds later than its popular twin, so that no one asked the
// question before and berth's search cache cannot answer it.
func (p *carPeak) uncachedSearch(ctx context.Context, i int64, sched time.Time) {
	rng := rand.New(rand.NewPCG(p.o.Seed^0x0c5, uint64(i)))
	q := uncachedQuery(p.periods[rng.IntN(len(p.periods))], carCities[rng.IntN(len(carCities))], i)
	p.loop.timed(ctx, "search-uncached", sched, call{method: http.MethodGet, url: p.srv.at(i) + "/cars?" + q.Encode()})
}

// uncachedQuery is the query of uncached search i: per, ending i+1
// seconds later, in city.
func uncachedQuery(per [2]time.Time, city string, i int64) url.Values {
	return url.Values{"city": {city}, "from": {per[0].Format(time.RFC3339)},
		"to": {per[1].Add(time.Duration(i+1) * time.Second).Format(time.RFC3339)}}
}

// hold is scheduled car hold i: a popular car for one to three days
// starting on one of the next sixty days.
func (p *carPeak) hold(ctx context.Context, i int64, sched time.Time) {
	rng := rand.New(rand.NewPCG(p.o.Seed^0xca5, uint64(i)))
	from := p.base.AddDate(0, 0, rng.IntN(60))
	to := from.AddDate(0, 0, 1+rng.IntN(3))
	body, _ := json.Marshal(map[string]any{"carId": p.cars[p.pop.pick(rng)],
		"from": from.Format(time.RFC3339), "to": to.Format(time.RFC3339)})
	p.loop.timed(ctx, "car-hold", sched, call{method: http.MethodPost, url: p.srv.at(i) + "/bookings",
		token: p.customers.of(i), body: body, decode: true,
		header: map[string]string{"Idempotency-Key": fmt.Sprintf("bench-car-%d-%s", i, randomHex(6))}})
}
