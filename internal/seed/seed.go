// Package seed loads a realistic flight schedule into a berth database with
// COPY: flights between real airport pairs at realistic hours, three fare
// classes per flight, and every seat of every flight.
package seed

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"berth.dev/berth/internal/policy"
)

// Flights describes the schedule to load.
type Flights struct {
	Days      int       // how many consecutive days
	PerDay    int       // flights per day
	Seats     int       // seats per flight, a multiple of 6 (rows of A–F)
	Start     time.Time // the first day (a date; its time of day is ignored)
	Seed      uint64    // makes the schedule reproducible
	Progress  io.Writer // progress lines go here; nil for none
	Workers   int       // parallel COPY streams
	Overbook  int       // economy overbooking limit
	Currency  string
	BasePrice int64 // economy price of a one-hour flight, minor units
}

// Defaults is a large airline's schedule: 7 days × 5,000 flights
// × 180 seats.
func Defaults(start time.Time) Flights {
	return Flights{Days: 7, PerDay: 5000, Seats: 180, Start: start, Seed: 1, Workers: 2,
		Overbook: 3, Currency: "VND", BasePrice: 1_200_000}
}

type airport struct {
	code string
	loc  *time.Location
}

// route is an airport pair with a typical block time.
type route struct {
	from, to airport
	minutes  int
	weight   int // how busy the route is
}

type fareClass struct {
	name     string
	rows     [2]int // first and last row
	priceX10 int64  // price multiple of economy, ×10
	rule     policy.Rule
}

func classes(rows int) []fareClass {
	return []fareClass{
		{"BUSINESS", [2]int{1, 3}, 40, policy.Flight(100, 72*time.Hour)},
		{"PREMIUM", [2]int{4, 8}, 18, policy.FlightDefault},
		{"ECONOMY", [2]int{9, rows}, 10, policy.Flight(80, 24*time.Hour)},
	}
}

// LoadFlights loads the schedule and reports how many flights and seats it
// wrote. It refuses to load on top of flights already departing in the
// same days, so a second run is harmless.
func LoadFlights(ctx context.Context, pool *pgxpool.Pool, f Flights) (flights, seats int, err error) {
	if f.Seats%6 != 0 || f.Seats < 54 {
		return 0, 0, fmt.Errorf("seats per flight must be a multiple of 6, at least 54 (got %d)", f.Seats)
	}
	first := time.Date(f.Start.Year(), f.Start.Month(), f.Start.Day(), 0, 0, 0, 0, time.UTC)
	last := first.AddDate(0, 0, f.Days)
	var existing int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM flight WHERE departure_date >= $1 AND departure_date < $2`,
		first, last).Scan(&existing); err != nil {
		return 0, 0, fmt.Errorf("seed: %w", err)
	}
	if existing > 0 {
		progress(f.Progress, "flights: %d already depart between %s and %s; nothing to do\n",
			existing, first.Format(time.DateOnly), last.AddDate(0, 0, -1).Format(time.DateOnly))
		return 0, 0, nil
	}
	routes, err := loadRoutes(ctx, pool)
	if err != nil {
		return 0, 0, err
	}
	rng := rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	total := f.Days * f.PerDay
	ids, err := reserveIDs(ctx, pool, total)
	if err != nil {
		return 0, 0, err
	}
	plan := makePlan(rng, routes, f, first, ids)
	start := time.Now()

	if err := copyFlights(ctx, pool, plan); err != nil {
		return 0, 0, err
	}
	progress(f.Progress, "flights: %d written (%s)\n", len(plan), time.Since(start).Round(time.Millisecond))
	if err := copyFares(ctx, pool, plan, f); err != nil {
		return 0, 0, err
	}
	n, err := copySeats(ctx, pool, plan, f, start)
	if err != nil {
		return 0, 0, err
	}
	progress(f.Progress, "seats: %d written; done in %s\n", n, time.Since(start).Round(time.Millisecond))
	if _, err := pool.Exec(ctx, `ANALYZE flight; ANALYZE fare_inventory; ANALYZE seat`); err != nil {
		return 0, 0, fmt.Errorf("seed: analyze: %w", err)
	}
	return len(plan), n, nil
}

type plannedFlight struct {
	id        int64
	code      string
	r         route
	departure time.Time
	price     int64
}

func makePlan(rng *rand.Rand, routes []route, f Flights, first time.Time, ids []int64) []plannedFlight {
	sum := 0
	for _, r := range routes {
		sum += r.weight
	}
	airlines := []string{"VN", "VJ", "QH", "BL", "VU"}
	used := map[string]bool{}
	plan := make([]plannedFlight, 0, len(ids))
	for day := range f.Days {
		date := first.AddDate(0, 0, day)
		for range f.PerDay {
			pick := rng.IntN(sum)
			var r route
			for _, cand := range routes {
				if pick < cand.weight {
					r = cand
					break
				}
				pick -= cand.weight
			}
			// Departures between 05:00 and 23:55 local, on five-minute marks.
			local := time.Date(date.Year(), date.Month(), date.Day(), 5, 0, 0, 0, r.from.loc).
				Add(time.Duration(rng.IntN(228)) * 5 * time.Minute)
			var code string
			for {
				code = fmt.Sprintf("%s%d", airlines[rng.IntN(len(airlines))], 100+rng.IntN(9900))
				key := code + local.Format(time.DateOnly) // one flight of a number a day
				if !used[key] {
					used[key] = true
					break
				}
			}
			// Longer flights cost more; a little noise per flight.
			price := f.BasePrice * int64(60+r.minutes) / 120 * int64(90+rng.IntN(30)) / 100 / 1000 * 1000
			plan = append(plan, plannedFlight{id: ids[len(plan)], code: code, r: r, departure: local, price: price})
		}
	}
	return plan
}

func loadRoutes(ctx context.Context, pool *pgxpool.Pool) ([]route, error) {
	rows, err := pool.Query(ctx, `SELECT code, tz, country FROM airport ORDER BY code`)
	if err != nil {
		return nil, fmt.Errorf("seed: airports: %w", err)
	}
	type ap struct {
		airport
		country string
	}
	var aps []ap
	var code, tz, country string
	if _, err := pgx.ForEachRow(rows, []any{&code, &tz, &country}, func() error {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			return err
		}
		aps = append(aps, ap{airport{code, loc}, country})
		return nil
	}); err != nil {
		return nil, fmt.Errorf("seed: airports: %w", err)
	}
	if len(aps) < 2 {
		return nil, fmt.Errorf("seed: the airport table has %d airports; run berth migrate first", len(aps))
	}
	hubs := map[string]int{"SGN": 10, "HAN": 10, "DAD": 5, "BKK": 4, "SIN": 4, "ICN": 3, "HKG": 3, "KUL": 3, "NRT": 2, "TPE": 2}
	var routes []route
	for _, a := range aps {
		for _, b := range aps {
			if a.code == b.code {
				continue
			}
			wa, wb := max(1, hubs[a.code]), max(1, hubs[b.code])
			domestic := a.country == b.country
			if !domestic && wa == 1 && wb == 1 {
				continue // no flights between two minor foreign airports
			}
			minutes := 70
			if !domestic {
				minutes = 120 + 30*((len(a.code)+int(a.code[0])+int(b.code[0]))%10)
			}
			weight := wa * wb
			if domestic && a.country == "VN" {
				weight *= 3
			}
			routes = append(routes, route{from: a.airport, to: b.airport, minutes: minutes, weight: weight})
		}
	}
	return routes, nil
}

func reserveIDs(ctx context.Context, pool *pgxpool.Pool, n int) ([]int64, error) {
	rows, err := pool.Query(ctx, `SELECT nextval(pg_get_serial_sequence('flight', 'id')) FROM generate_series(1, $1)`, n)
	if err != nil {
		return nil, fmt.Errorf("seed: reserve flight ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("seed: reserve flight ids: %w", err)
	}
	return ids, nil
}

func copyFlights(ctx context.Context, pool *pgxpool.Pool, plan []plannedFlight) error {
	i := 0
	_, err := pool.CopyFrom(ctx, pgx.Identifier{"flight"},
		[]string{"id", "code", "origin", "destination", "departure_at", "arrival_at", "departure_date"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == len(plan) {
				return nil, nil
			}
			p := plan[i]
			i++
			dep := p.departure
			day := time.Date(dep.Year(), dep.Month(), dep.Day(), 0, 0, 0, 0, time.UTC)
			return []any{p.id, p.code, p.r.from.code, p.r.to.code, dep, dep.Add(time.Duration(p.r.minutes) * time.Minute), day}, nil
		}))
	if err != nil {
		return fmt.Errorf("seed: copy flights: %w", err)
	}
	return nil
}

// copyFares writes every fare class and its one quota bucket in one
// transaction, so the commit-time check that bucket shares add up to the
// class quota sees both.
func copyFares(ctx context.Context, pool *pgxpool.Pool, plan []plannedFlight, f Flights) error {
	cls := classes(f.Seats / 6)
	rules := make([][]byte, len(cls))
	for i, c := range cls {
		b, err := json.Marshal(c.rule)
		if err != nil {
			return err
		}
		rules[i] = b
	}
	quota := func(ci int) (capacity, overbook int) {
		c := cls[ci]
		capacity = (c.rows[1] - c.rows[0] + 1) * 6
		if c.name == "ECONOMY" {
			overbook = f.Overbook
		}
		return capacity, overbook
	}
	// perFare streams row of every flight's every fare class.
	perFare := func(row func(p plannedFlight, ci int) []any) pgx.CopyFromSource {
		i := 0
		return pgx.CopyFromFunc(func() ([]any, error) {
			if i == len(plan)*len(cls) {
				return nil, nil
			}
			p, ci := plan[i/len(cls)], i%len(cls)
			i++
			return row(p, ci), nil
		})
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		skipTriggers(ctx, tx)
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"fare_inventory"},
			[]string{"flight_id", "fare_class", "price", "currency", "capacity", "overbook_limit", "refund_rule"},
			perFare(func(p plannedFlight, ci int) []any {
				capacity, overbook := quota(ci)
				return []any{p.id, cls[ci].name, p.price * cls[ci].priceX10 / 10, f.Currency, capacity, overbook, rules[ci]}
			}))
		if err != nil {
			return fmt.Errorf("seed: copy fares: %w", err)
		}
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"fare_bucket"}, []string{"flight_id", "fare_class", "bucket", "quota"},
			perFare(func(p plannedFlight, ci int) []any {
				capacity, overbook := quota(ci)
				return []any{p.id, cls[ci].name, 0, capacity + overbook}
			}))
		if err != nil {
			return fmt.Errorf("seed: copy fare buckets: %w", err)
		}
		return nil
	})
}

// skipTriggers turns off, for the rest of tx, the per-row foreign-key and
// constraint triggers, when the role may (superusers): the seed writes rows
// that are consistent by construction, and the triggers would cost most of
// the load's time. Others just wait longer.
func skipTriggers(ctx context.Context, tx pgx.Tx) {
	var super bool
	if err := tx.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err == nil && super {
		_, _ = tx.Exec(ctx, `SET LOCAL session_replication_role = replica`)
	}
}

// copySeats streams every seat with several COPYs in parallel, each over a
// share of the flights.
func copySeats(ctx context.Context, pool *pgxpool.Pool, plan []plannedFlight, f Flights, start time.Time) (int, error) {
	cls := classes(f.Seats / 6)
	var written atomic.Int64
	total := len(plan) * f.Seats
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := written.Load()
				progress(f.Progress, "seats: %d / %d (%d%%) %s\n", n, total, n*100/int64(max(total, 1)), time.Since(start).Round(time.Second))
			}
		}
	})
	defer func() { close(done); wg.Wait() }()

	workers := max(1, f.Workers)
	g, ctx := errgroup.WithContext(ctx)
	for w := range workers {
		g.Go(func() error {
			share := plan[w*len(plan)/workers : (w+1)*len(plan)/workers]
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			skipTriggers(ctx, tx)
			fi, seat, rows := 0, 0, 0
			row := make([]any, 3)
			_, err = tx.CopyFrom(ctx, pgx.Identifier{"seat"}, []string{"flight_id", "seat_no", "fare_class"},
				pgx.CopyFromFunc(func() ([]any, error) {
					if seat == f.Seats {
						fi, seat = fi+1, 0
					}
					if fi == len(share) {
						return nil, nil
					}
					r := seat/6 + 1
					row[0] = share[fi].id
					row[1] = fmt.Sprintf("%d%c", r, 'A'+seat%6)
					for _, c := range cls {
						if r >= c.rows[0] && r <= c.rows[1] {
							row[2] = c.name
						}
					}
					seat++
					if rows++; rows%1000 == 0 {
						written.Add(1000)
					}
					return row, nil
				}))
			if err != nil {
				return err
			}
			return tx.Commit(ctx)
		})
	}
	if err := g.Wait(); err != nil {
		return 0, fmt.Errorf("seed: copy seats: %w", err)
	}
	return total, nil
}

func progress(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format, args...)
	}
}
