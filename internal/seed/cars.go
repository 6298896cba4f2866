package seed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"berth.dev/berth/internal/policy"
	"berth.dev/berth/internal/rental"
)

// Cars describes the cars to load and the booking history to give them.
type Cars struct {
	Cars     int      // how many cars
	Bookings int      // about how many bookings, over all cars together
	Cities   []string // city codes; the first ones get the most cars
	// Now splits the history: bookings that ended before it are COMPLETED,
	// CANCELLED or EXPIRED, those under way ON_TRIP, later ones mostly
	// CONFIRMED.
	Now        time.Time
	PastDays   int // how far back the history starts
	FutureDays int // how far ahead bookings reach
	// Popular is the share of cars (percent) booked five times as often as
	// the others: the few hundred cars everyone wants before Tet.
	Popular int
	Seed    uint64 // makes the cars and history reproducible
	// EventRetention is how far back the history keeps its booking
	// events (BERTH_EVENT_RETENTION, required); older ones would have been
	// pruned.
	EventRetention time.Duration
	Workers        int // parallel COPY streams
	Currency       string
	Progress       io.Writer // progress lines go here; nil for none
}

// CarDefaults is a large rental fleet: 20,000 cars across the big
// cities of Vietnam, with about 200,000 bookings over the past 180 and next
// 60 days.
func CarDefaults(now time.Time) Cars {
	return Cars{Cars: 20_000, Bookings: 200_000, Cities: []string{"HCM", "HN", "DN", "NT", "PQ", "DL", "HP", "CT"},
		Now: now, PastDays: 180, FutureDays: 60, Popular: 2, Seed: 1, Workers: 2, Currency: "VND"}
}

// Registration prefixes of the cities berth knows, for plausible plates;
// other cities get unused ones.
var platePrefix = map[string]int{"HN": 30, "HCM": 51, "DN": 43, "NT": 79, "PQ": 68, "DL": 49, "HP": 15, "CT": 65}

// How many cars a city gets, relative to the others, by its place in the
// list.
var cityWeights = []int{30, 28, 12, 8, 7, 6, 5, 4}

type carModel struct {
	name           string
	daily, deposit int64 // VND
}

var carModels = []carModel{
	{"Kia Morning", 600_000, 3_000_000},
	{"Hyundai Grand i10", 650_000, 3_000_000},
	{"Toyota Vios", 800_000, 5_000_000},
	{"Honda City", 850_000, 5_000_000},
	{"Hyundai Accent", 800_000, 5_000_000},
	{"Mazda 3", 1_000_000, 5_000_000},
	{"VinFast VF 5", 750_000, 5_000_000},
	{"VinFast VF 8", 1_500_000, 10_000_000},
	{"Mitsubishi Xpander", 1_000_000, 5_000_000},
	{"Kia Seltos", 1_100_000, 5_000_000},
	{"Toyota Fortuner", 1_600_000, 10_000_000},
	{"Ford Ranger", 1_400_000, 10_000_000},
	{"Hyundai Santa Fe", 1_800_000, 10_000_000},
	{"Kia Carnival", 2_500_000, 15_000_000},
}

type plannedCar struct {
	id         int64
	host       int64
	plate      string
	model      carModel
	city       string
	turnaround time.Duration
	weight     int
}

// LoadCars loads the cars and their history and reports how many of each
// it wrote. Bookings go through the booking table's trigger like any other,
// so their blocked ranges are computed by the database, and never overlap:
// each car's timeline is cut into slots, one booking (and its turnaround)
// per slot. It does nothing when the first car it would write is already
// there, so a second run is harmless.
func LoadCars(ctx context.Context, pool *pgxpool.Pool, c Cars) (cars, bookings int, err error) {
	if c.Cars <= 0 {
		return 0, 0, nil
	}
	if c.EventRetention <= 0 {
		return 0, 0, errors.New("seed: Cars.EventRetention is required (BERTH_EVENT_RETENTION)")
	}
	if len(c.Cities) == 0 {
		return 0, 0, fmt.Errorf("seed: no cities for the cars")
	}
	plan := planCars(c)
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM car WHERE plate = $1)`, plan[0].plate).Scan(&exists); err != nil {
		return 0, 0, fmt.Errorf("seed: %w", err)
	}
	if exists {
		progress(c.Progress, "cars: %s is already listed; nothing to do\n", plan[0].plate)
		return 0, 0, nil
	}
	start := time.Now()
	ids, err := reserveCarIDs(ctx, pool, len(plan))
	if err != nil {
		return 0, 0, err
	}
	for i := range plan {
		plan[i].id = ids[i]
	}
	if err := copyCars(ctx, pool, plan, c); err != nil {
		return 0, 0, err
	}
	progress(c.Progress, "cars: %d written (%s)\n", len(plan), time.Since(start).Round(time.Millisecond))
	n, err := copyCarBookings(ctx, pool, plan, c, start)
	if err != nil {
		return 0, 0, err
	}
	events, err := completeHistory(ctx, pool, ids, c.Now, c.EventRetention)
	if err != nil {
		return 0, 0, err
	}
	progress(c.Progress, "car history: charges, refunds and %d recent events written (%s)\n", events,
		time.Since(start).Round(time.Millisecond))
	// VACUUM as well: a search reads cars and calendars index-only
	// where the visibility map says a page is all visible, which a
	// database in service has long had and a fresh load not yet.
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) car, booking`); err != nil {
		return 0, 0, fmt.Errorf("seed: vacuum: %w", err)
	}
	progress(c.Progress, "car bookings: %d written; done in %s\n", n, time.Since(start).Round(time.Millisecond))
	return len(plan), n, nil
}

func planCars(c Cars) []plannedCar {
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed^0x7f4a7c159e3779b9))
	weights := make([]int, len(c.Cities))
	sum := 0
	for i := range c.Cities {
		weights[i] = 3
		if i < len(cityWeights) {
			weights[i] = cityWeights[i]
		}
		sum += weights[i]
	}
	perCity := map[string]int{}
	hosts := max(1, c.Cars/8)
	turnarounds := []time.Duration{0, time.Hour, 2 * time.Hour, 2 * time.Hour, 3 * time.Hour}
	plan := make([]plannedCar, c.Cars)
	for i := range plan {
		pick, ci := rng.IntN(sum), 0
		for pick >= weights[ci] {
			pick -= weights[ci]
			ci++
		}
		city := c.Cities[ci]
		prefix, ok := platePrefix[city]
		if !ok {
			prefix = 80 + ci
		}
		n := perCity[city]
		perCity[city]++
		weight := 1
		if rng.IntN(100) < c.Popular {
			weight = 5
		}
		plan[i] = plannedCar{
			host:       int64(900_001 + rng.IntN(hosts)),
			plate:      fmt.Sprintf("%02d%c-%03d.%02d", prefix, 'A'+n/100_000%26, n/100%1000, n%100),
			model:      carModels[rng.IntN(len(carModels))],
			city:       city,
			turnaround: turnarounds[rng.IntN(len(turnarounds))],
			weight:     weight,
		}
	}
	return plan
}

func reserveCarIDs(ctx context.Context, pool *pgxpool.Pool, n int) ([]int64, error) {
	rows, err := pool.Query(ctx, `SELECT nextval(pg_get_serial_sequence('car', 'id')) FROM generate_series(1, $1)`, n)
	if err != nil {
		return nil, fmt.Errorf("seed: reserve car ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("seed: reserve car ids: %w", err)
	}
	return ids, nil
}

func copyCars(ctx context.Context, pool *pgxpool.Pool, plan []plannedCar, c Cars) error {
	i := 0
	created := c.Now.AddDate(0, 0, -c.PastDays-30)
	_, err := pool.CopyFrom(ctx, pgx.Identifier{"car"},
		[]string{"id", "host_id", "plate", "model", "city", "daily_price", "deposit", "currency", "turnaround", "created_at"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == len(plan) {
				return nil, nil
			}
			p := plan[i]
			i++
			return []any{p.id, p.host, p.plate, p.model.name, p.city, p.model.daily, p.model.deposit, c.Currency,
				p.turnaround, created}, nil
		}))
	if err != nil {
		return fmt.Errorf("seed: copy cars: %w", err)
	}
	return nil
}

var carBookingColumns = []string{"kind", "status", "customer_id", "host_id", "amount", "currency", "hold_expires_at",
	"starts_at", "refund_rule", "car_id", "period", "rental_price", "utc_offset", "cancel_reason", "refund_amount",
	"version", "created_at", "updated_at"}

// copyCarBookings streams every car's history with several COPYs in
// parallel, each over a share of the cars. Each car's bookings come from
// its own random source, so the history does not depend on the workers.
func copyCarBookings(ctx context.Context, pool *pgxpool.Pool, plan []plannedCar, c Cars, start time.Time) (int, error) {
	rule, err := json.Marshal(policy.CarRental)
	if err != nil {
		return 0, err
	}
	totalWeight := 0
	for _, p := range plan {
		totalWeight += p.weight
	}
	var written atomic.Int64
	workers := max(1, c.Workers)
	g, ctx := errgroup.WithContext(ctx)
	for w := range workers {
		g.Go(func() error {
			lo, hi := w*len(plan)/workers, (w+1)*len(plan)/workers
			ci := lo
			var pending [][]any
			_, err := pool.CopyFrom(ctx, pgx.Identifier{"booking"}, carBookingColumns,
				pgx.CopyFromFunc(func() ([]any, error) {
					for len(pending) == 0 {
						if ci == hi {
							return nil, nil
						}
						pending = history(c, plan[ci], ci, totalWeight, rule)
						ci++
						if ci%5000 == 0 {
							progress(c.Progress, "car bookings: %d written, %s\n", written.Load(),
								time.Since(start).Round(time.Second))
						}
					}
					row := pending[0]
					pending = pending[1:]
					written.Add(1)
					return row, nil
				}))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, fmt.Errorf("seed: copy car bookings: %w", err)
	}
	return int(written.Load()), nil
}

// history returns the booking rows of car p (the i-th car): its timeline,
// from PastDays before Now to FutureDays after, cut into as many equal
// slots as the car gets bookings, each holding one booking and its
// turnaround, on whole hours.
func history(c Cars, p plannedCar, i, totalWeight int, rule []byte) [][]any {
	rng := rand.New(rand.NewPCG(c.Seed+uint64(i), uint64(p.id)))
	want := float64(c.Bookings) * float64(p.weight) / float64(totalWeight)
	n := int(want)
	if rng.Float64() < want-float64(n) {
		n++
	}
	if n == 0 {
		return nil
	}
	first := c.Now.Truncate(time.Hour).AddDate(0, 0, -c.PastDays)
	hours := (c.PastDays + c.FutureDays) * 24
	slot := hours / n
	turn := int((p.turnaround + time.Hour - 1) / time.Hour)
	zone := time.FixedZone("", 7*3600)
	rows := make([][]any, 0, n)
	for s := range n {
		room := slot - turn
		if room < 4 {
			continue // the car is booked back to back: no room for another
		}
		length := min(room, 24*(1+rng.IntN(5))-rng.IntN(12))
		at := s*slot + rng.IntN(room-length+1)
		from := first.Add(time.Duration(at) * time.Hour).In(zone)
		to := from.Add(time.Duration(length) * time.Hour)
		rows = append(rows, bookingRow(c, p, rng, from, to, rule))
	}
	return rows
}

func bookingRow(c Cars, p plannedCar, rng *rand.Rand, from, to time.Time, rule []byte) []any {
	created := from.Add(-time.Duration(1+rng.IntN(30*24)) * time.Hour)
	if created.After(c.Now) {
		created = c.Now.Add(-time.Duration(1+rng.IntN(24*60)) * time.Minute)
	}
	expires := created.Add(15 * time.Minute)
	if expires.After(from) {
		expires = from
	}
	lastCancel := from // a booking is cancelled before pickup, and before now
	if lastCancel.After(c.Now) {
		lastCancel = c.Now
	}
	var (
		status       string
		reason       *string
		refund       *int64
		version      = 2
		updated      = created.Add(time.Duration(1+rng.IntN(14)) * time.Minute)
		roll         = rng.IntN(100)
		cancelledAt  = created.Add(time.Duration(rng.Int64N(int64(max(0, lastCancel.Sub(created))) + 1)))
		customer, by = "customer", "host"
	)
	cancel := func() {
		status, version, updated = "CANCELLED", 3, cancelledAt
		amount := policy.CarRental.Refund(p.model.deposit, from, cancelledAt)
		r := &customer
		if rng.IntN(5) == 0 {
			r, amount = &by, p.model.deposit
		}
		reason, refund = r, &amount
	}
	switch {
	case !to.After(c.Now): // over
		switch {
		case roll < 8:
			status, version, updated = "EXPIRED", 2, expires
		case roll < 20:
			cancel()
		default:
			status, version, updated = "COMPLETED", 4, to
		}
	case !from.After(c.Now): // under way
		if roll < 10 {
			cancel()
		} else {
			status, version, updated = "ON_TRIP", 3, from
		}
	default: // ahead
		switch {
		case roll < 2:
			status, version, updated = "EXPIRED", 2, expires
		case roll < 12:
			cancel()
		default:
			status = "CONFIRMED"
		}
	}
	period := pgtype.Range[pgtype.Timestamptz]{
		Lower: pgtype.Timestamptz{Time: from, Valid: true}, LowerType: pgtype.Inclusive,
		Upper: pgtype.Timestamptz{Time: to, Valid: true}, UpperType: pgtype.Exclusive,
		Valid: true,
	}
	return []any{"car", status, int64(1 + rng.IntN(200_000)), p.host, p.model.deposit, c.Currency, expires,
		from, rule, p.id, period, rental.RentalPrice(p.model.daily, from, to), int32(7 * 3600), reason, refund,
		version, created, updated}
}

// DemoHost is the host to sign in as to see host pages with something on
// them: the owner of the first car. Without cars it is 2001, a host with
// none.
func DemoHost(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) int64 {
	host := int64(2001)
	_ = db.QueryRow(ctx, `SELECT host_id FROM car ORDER BY id LIMIT 1`).Scan(&host)
	return host
}
