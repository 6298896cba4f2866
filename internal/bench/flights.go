package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/policy"
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

// enableWaitingRoom switches a flight's waiting room on (API.md, "Surge:
// waiting room").
func enableWaitingRoom(ctx context.Context, c *client, srv *server, flightID int64, admitPerSecond int) error {
	body := fmt.Appendf(nil, `{"waitingRoom": {"enabled": true, "admitPerSecond": %d}}`, admitPerSecond)
	_, err := c.must(ctx, call{method: http.MethodPatch, url: fmt.Sprintf("%s/admin/flights/%d", srv.url, flightID),
		token: srv.token(auth.Admin, adminID), body: body}, http.StatusOK)
	return err
}

// hotFlightLetters are the seat letters of the hot flight: 24 abreast
// (no I or O), 999 rows.
const (
	hotFlightLetters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
	hotFlightRows    = 999
)

// createHotFlight inserts the flight of the hot-flight measurement
// straight into the bench's own database: 23,976 seats, far beyond the
// 1,000 a class may have through the admin API, so that 32 clients holding
// two seats each cannot sell it out within the measurement.
func createHotFlight(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	rule, err := json.Marshal(policy.FlightDefault)
	if err != nil {
		return 0, err
	}
	dep := time.Now().Add(60 * 24 * time.Hour).Truncate(time.Minute)
	seats := hotFlightRows * len(hotFlightLetters)
	var id int64
	err = pool.QueryRow(ctx, `INSERT INTO flight (code, origin, destination, departure_at, arrival_at, departure_date)
		VALUES ($1, 'SGN', 'HAN', $2::timestamptz, $3,
			($2::timestamptz AT TIME ZONE (SELECT tz FROM airport WHERE code = 'SGN'))::date) RETURNING id`,
		fmt.Sprintf("HT%d", flightSeq.Add(1)), dep, dep.Add(2*time.Hour)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert hot flight: %w", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO fare_inventory (flight_id, fare_class, price, currency, capacity, refund_rule)
		VALUES ($1, 'ECONOMY', 1500000, 'VND', $2, $3)`, id, seats, rule); err != nil {
		return 0, fmt.Errorf("insert hot flight fare: %w", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO seat (flight_id, seat_no, fare_class)
		SELECT $1, r || l, 'ECONOMY' FROM generate_series(1, $2) r, unnest(string_to_array($3, NULL)) l`,
		id, hotFlightRows, hotFlightLetters); err != nil {
		return 0, fmt.Errorf("insert hot flight seats: %w", err)
	}
	return id, nil
}

// hotPair returns the i-th pair of adjacent seats of the hot flight, so that
// no two attempts ask for the same seat: every attempt can commit, and the
// measurement is of commits, not of conflicts.
func hotPair(i int64) []string {
	perRow := int64(len(hotFlightLetters) / 2)
	row, k := i/perRow+1, 2*(i%perRow)
	return []string{strconv.FormatInt(row, 10) + string(hotFlightLetters[k]), strconv.FormatInt(row, 10) + string(hotFlightLetters[k+1])}
}

// hotPairs is how many distinct pairs the hot flight has.
const hotPairs = hotFlightRows * len(hotFlightLetters) / 2

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
