package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/berth/internal/auth"
)

// The cabin of every sale flight: 180 seats, six abreast, in two classes.
type cabinClass struct {
	class             string
	firstRow, lastRow int
	price             int64
}

const seatLetters = "ABCDEF"

var cabin = []cabinClass{
	{class: "BUSINESS", firstRow: 1, lastRow: 4, price: 5_000_000},
	{class: "ECONOMY", firstRow: 5, lastRow: 30, price: 1_500_000},
}

// SeatsPerFlight is the size of every sale flight.
const SeatsPerFlight = 180

func (c cabinClass) seatList() []string {
	var out []string
	for r := c.firstRow; r <= c.lastRow; r++ {
		for _, l := range seatLetters {
			out = append(out, strconv.Itoa(r)+string(l))
		}
	}
	return out
}

// Customer ids: each simulated customer has its own, so per-customer limits
// apply as they would to real people.
const (
	adminID          = 1
	hostID           = 2001
	saleCustomers    = 1_000_000  // + scheduled request index
	hotCustomers     = 10_000_000 // + hot-flight attempt
	rejectCustomers  = 20_000_000 // + client's token slot
	setupCustomer    = 30_000_000
	rejectTokenSlots = 1024
)

var flightSeq atomic.Int64

type flightFare struct {
	FareClass     string   `json:"fareClass"`
	Price         int64    `json:"price"`
	Currency      string   `json:"currency"`
	Capacity      int      `json:"capacity"`
	OverbookLimit int      `json:"overbookLimit"`
	Seats         []string `json:"seats"`
}

// createFlight creates a flight SGN→HAN through the admin API and returns
// its id.
func createFlight(ctx context.Context, c *client, srv *server, fares []flightFare) (int64, error) {
	n := flightSeq.Add(1)
	dep := time.Now().Add(30*24*time.Hour + time.Duration(n)*time.Hour).Truncate(time.Minute)
	body, err := json.Marshal(map[string]any{
		"code": fmt.Sprintf("BB%d", 1000+n), "from": "SGN", "to": "HAN",
		"departureAt": dep.Format(time.RFC3339), "arrivalAt": dep.Add(2 * time.Hour).Format(time.RFC3339),
		"fares": fares,
	})
	if err != nil {
		return 0, err
	}
	f, err := c.must(ctx, call{method: http.MethodPost, url: srv.url + "/admin/flights",
		token: srv.token(auth.Admin, adminID), body: body}, http.StatusCreated)
	if err != nil {
		return 0, fmt.Errorf("create flight: %w", err)
	}
	return f.ID, nil
}

// createSaleFlight creates one flight of the sale: 180 seats in classes.
func createSaleFlight(ctx context.Context, c *client, srv *server) (int64, error) {
	var fares []flightFare
	for _, cc := range cabin {
		seats := cc.seatList()
		fares = append(fares, flightFare{FareClass: cc.class, Price: cc.price, Currency: "VND", Capacity: len(seats), Seats: seats})
	}
	return createFlight(ctx, c, srv, fares)
}

// enableWaitingRoom switches a flight's waiting room on (docs/api.md, "Surge:
// waiting room").
func enableWaitingRoom(ctx context.Context, c *client, srv *server, flightID int64, admitPerSecond int) error {
	body := fmt.Appendf(nil, `{"waitingRoom": {"enabled": true, "admitPerSecond": %d}}`, admitPerSecond)
	_, err := c.must(ctx, call{method: http.MethodPatch, url: fmt.Sprintf("%s/admin/flights/%d", srv.url, flightID),
		token: srv.token(auth.Admin, adminID), body: body}, http.StatusOK)
	return err
}

// The hot-flight measurement holds pairs of adjacent seats on one flight at
// a time. A class has at most 1,000 seats through the admin API, so the
// measurement is given a row of such flights created beforehand, and pair
// i is pair i mod 500 of flight i / 500: the clients move on together when
// a flight is full, and at any moment they all compete for one flight's
// counter and seats, as in a sale.
const (
	hotFlightLetters = "ABCDEFGHJK" // ten abreast
	hotFlightRows    = 100
	hotPairsPerRow   = len(hotFlightLetters) / 2
	hotPairsPerPlane = hotFlightRows * hotPairsPerRow
	// hotPlanRate is the commit rate the hot flights are planned for: far
	// beyond what two cores reach through HTTP (the hand-written
	// batch of 16 holds per transaction reached 19,000/s in raw SQL). If
	// a run ever gets there, the measurement stops early and its rate
	// holds all the same.
	hotPlanRate = 6000
)

// hotFlightCount is how many hot flights a measurement of d needs.
func hotFlightCount(d time.Duration) int {
	return max(2, int(d.Seconds()*hotPlanRate)/hotPairsPerPlane+1)
}

// createHotFlights creates n flights of 1,000 ECONOMY seats through the
// admin API, a few at a time.
func createHotFlights(ctx context.Context, c *client, srv *server, n int) ([]int64, error) {
	var seats []string
	for r := 1; r <= hotFlightRows; r++ {
		for _, l := range hotFlightLetters {
			seats = append(seats, strconv.Itoa(r)+string(l))
		}
	}
	fare := []flightFare{{FareClass: "ECONOMY", Price: 1_500_000, Currency: "VND", Capacity: len(seats), Seats: seats}}
	ids := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for k := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ids[k], errs[k] = createFlight(ctx, c, srv, fare)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("create the hot flights: %w", err)
	}
	return ids, nil
}

// hotPair returns the flight and seats of the i-th hold of the hot-flight
// measurement: no two holds ask for the same seat, so every one can
// commit, and the measurement is of commits, not of conflicts.
func hotPair(flights []int64, i int64) (int64, []string) {
	plane, p := i/int64(hotPairsPerPlane), i%int64(hotPairsPerPlane)
	row, k := p/int64(hotPairsPerRow)+1, 2*(p%int64(hotPairsPerRow))
	r := strconv.FormatInt(row, 10)
	return flights[plane], []string{r + string(hotFlightLetters[k]), r + string(hotFlightLetters[k+1])}
}

// popularity draws an index in [0, n) with probability proportional to
// 1/(k+1)^s: a few flights (or cars) draw most of the demand.
type popularity []float64

func newPopularity(n int, s float64) popularity {
	cdf := make(popularity, n)
	var sum float64
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), s)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	return cdf
}

func (p popularity) pick(rng *rand.Rand) int {
	return min(sort.SearchFloat64s(p, rng.Float64()), len(p)-1)
}

// holdBody is the body of a flight hold.
type holdBody struct {
	FlightID  int64    `json:"flightId"`
	FareClass string   `json:"fareClass"`
	Seats     []string `json:"seats,omitempty"`
	Quantity  int      `json:"quantity,omitempty"`
}

// saleHold draws what customer i of the sale asks for: a flight by
// popularity, a class by its share of the seats, then 1–3 adjacent seats
// of one row or a quantity of 1–2.
func saleHold(rng *rand.Rand, flights []int64, pop popularity, seatShare float64) holdBody {
	b := holdBody{FlightID: flights[pop.pick(rng)]}
	cc := cabin[1]
	if rng.IntN(SeatsPerFlight) < (cabin[0].lastRow-cabin[0].firstRow+1)*len(seatLetters) {
		cc = cabin[0]
	}
	b.FareClass = cc.class
	if rng.Float64() >= seatShare {
		b.Quantity = 1 + rng.IntN(2)
		return b
	}
	n := 1 + rng.IntN(3)
	row := cc.firstRow + rng.IntN(cc.lastRow-cc.firstRow+1)
	first := rng.IntN(len(seatLetters) - n + 1)
	for k := range n {
		b.Seats = append(b.Seats, strconv.Itoa(row)+string(seatLetters[first+k]))
	}
	return b
}
