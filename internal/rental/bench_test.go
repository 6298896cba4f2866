package rental_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
	"berth.dev/berth/internal/rental"
	"berth.dev/berth/internal/seed"
)

func newService(pool *pgxpool.Pool, searchTTL time.Duration) *rental.Service {
	return newServiceWith(pool, rental.Config{HoldTTL: 15 * time.Minute, SearchTTL: searchTTL})
}

// newServiceWith is a car service on pool with cfg, on the system clock.
func newServiceWith(pool *pgxpool.Pool, cfg rental.Config) *rental.Service {
	life := booking.NewLifecycle(clock.System{}, map[booking.Kind]booking.Inventory{booking.KindCar: rental.Inventory{}})
	return rental.NewService(pool, clock.System{}, life, cfg)
}

// latencies collects per-operation durations from parallel workers and
// reports their median and 99th percentile.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	if len(l.d) == 0 {
		return
	}
	slices.Sort(l.d)
	b.ReportMetric(float64(l.d[len(l.d)/2])/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(l.d[len(l.d)*99/100])/float64(time.Millisecond), "p99-ms")
}

// BenchmarkHoldPopularCars is the peak before Tet: many customers holding
// a few hundred popular cars for overlapping periods in the next weeks. A
// hold either gets the car (201) or is refused by the constraint (409);
// both count as an operation, and holds/s reports the successful ones.
func BenchmarkHoldPopularCars(b *testing.B) {
	pool := pgtest.NewPool(b)
	ctx := context.Background()
	const cars = 300
	if _, err := pool.Exec(ctx, `INSERT INTO car (host_id, plate, model, city, daily_price, deposit, currency, turnaround, created_at)
		SELECT 900000 + i, format('51H-%s', i), 'Toyota Vios', 'HCM', 800000, 5000000, 'VND', interval '2 hours', now()
		FROM generate_series(1, $1) AS i`, cars); err != nil {
		b.Fatal(err)
	}
	svc := newService(pool, time.Minute)
	start := time.Now().Add(24 * time.Hour).Truncate(time.Hour)
	var held, refused atomic.Int64
	var lat latencies
	var customer atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	began := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(uint64(customer.Add(1)), 42))
		for pb.Next() {
			from := start.Add(time.Duration(rng.IntN(30*24)) * time.Hour)
			r := rental.HoldRequest{CustomerID: customer.Add(1), CarID: 1 + rng.Int64N(cars),
				From: from, To: from.Add(time.Duration(12+rng.IntN(60)) * time.Hour)}
			t0 := time.Now()
			_, err := svc.Hold(ctx, r)
			lat.add(time.Since(t0))
			switch {
			case err == nil:
				held.Add(1)
			case fault.Is(err, fault.CarUnavailable):
				refused.Add(1)
			default:
				b.Error(err)
				return
			}
		}
	})
	elapsed := time.Since(began)
	b.StopTimer()
	b.ReportMetric(float64(held.Load())/elapsed.Seconds(), "holds/s")
	b.ReportMetric(float64(held.Load()+refused.Load())/elapsed.Seconds(), "attempts/s")
	b.ReportMetric(float64(refused.Load())*100/float64(max(1, held.Load()+refused.Load())), "%refused")
	lat.report(b)
}

var (
	fleetOnce sync.Once
	fleetURL  string
	fleetErr  error
)

// fleet is a database seeded like `berth seed --flights 0`: 20,000 cars in
// eight cities and about 200,000 bookings, shared by the search benchmarks
// of one run.
func fleet(b *testing.B) string {
	fleetOnce.Do(func() {
		fleetURL = pgtest.NewURL(b)
		pool, err := pg.Open(context.Background(), fleetURL, pg.PoolConfig{MaxConns: 4})
		if err != nil {
			fleetErr = err
			return
		}
		defer pool.Close()
		fleet := seed.CarDefaults(clock.System{}.Now())
		fleet.EventRetention = 7 * 24 * time.Hour
		_, _, fleetErr = seed.LoadCars(context.Background(), pool, fleet)
	})
	if fleetErr != nil {
		b.Fatal(fleetErr)
	}
	return fleetURL
}

var cities = []string{"HCM", "HN", "DN", "NT", "PQ", "DL", "HP", "CT"}

// randomQuery is a search a customer might make: a city, a pickup on the
// hour in the next 50 days, one to seven days.
func randomQuery(rng *rand.Rand) rental.SearchQuery {
	from := time.Now().Add(time.Hour).Truncate(time.Hour).Add(time.Duration(rng.IntN(50*24)) * time.Hour)
	return rental.SearchQuery{City: cities[rng.IntN(len(cities))], From: from,
		To: from.Add(time.Duration(24+rng.IntN(6*24)) * time.Hour)}
}

// BenchmarkSearch measures GET /cars over the seeded fleet: a search that
// loads its city's calendar (what each reload costs the database: the
// search TTL so short that every search loads), searches answered from the
// calendars kept (every one a new city and period, four at a time), and
// through HTTP.
func BenchmarkSearch(b *testing.B) {
	dbURL := fleet(b)
	pool := pgtest.Open(b, dbURL)
	ctx := context.Background()

	b.Run("load", func(b *testing.B) {
		svc := newService(pool, time.Nanosecond)
		rng := rand.New(rand.NewPCG(1, 2))
		var lat latencies
		var found int
		for b.Loop() {
			t0 := time.Now()
			res, err := svc.Search(ctx, randomQuery(rng))
			lat.add(time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
			found += len(res.Cars)
		}
		b.ReportMetric(float64(found)/float64(b.N), "cars/op")
		lat.report(b)
	})

	b.Run("memory", func(b *testing.B) {
		svc := newService(pool, time.Minute)
		for _, c := range cities { // every city loaded before the clock starts
			if _, err := svc.Search(ctx, rental.SearchQuery{City: c, From: time.Now().Add(time.Hour),
				To: time.Now().Add(25 * time.Hour)}); err != nil {
				b.Fatal(err)
			}
		}
		var lat latencies
		var seq atomic.Uint64
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			rng := rand.New(rand.NewPCG(3, seq.Add(1)))
			for pb.Next() {
				t0 := time.Now()
				_, err := svc.Search(ctx, randomQuery(rng))
				lat.add(time.Since(t0))
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
		lat.report(b)
	})

	// Through HTTP: a berth on the seeded database. Uncached asks for
	// periods on random minutes, which no earlier request asked for;
	// cached asks for the same 64 searches again. Both are answered from
	// the city calendars once loaded.
	s := apptest.Start(b, apptest.Options{DatabaseURL: dbURL})
	s.Clock.Set(time.Now())
	path := func(q rental.SearchQuery) string {
		return "/cars?" + url.Values{"city": {q.City}, "from": {q.From.Format(time.RFC3339)}, "to": {q.To.Format(time.RFC3339)}}.Encode()
	}
	get := func(b *testing.B, lat *latencies, p string) {
		t0 := time.Now()
		r := s.Do(apptest.Request{Method: http.MethodGet, Path: p})
		lat.add(time.Since(t0))
		if r.Status != http.StatusOK {
			b.Fatalf("GET %s: %d %s", p, r.Status, r.Body)
		}
	}
	b.Run("http/uncached", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(5, 6))
		var lat latencies
		for b.Loop() {
			q := randomQuery(rng)
			q.From = q.From.Add(time.Duration(rng.IntN(60)) * time.Minute)
			get(b, &lat, path(q))
		}
		lat.report(b)
	})
	b.Run("http/cached", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(7, 8))
		paths := make([]string, 64)
		var lat latencies
		for i := range paths {
			paths[i] = path(randomQuery(rng))
			get(b, &lat, paths[i])
		}
		lat = latencies{}
		i := 0
		for b.Loop() {
			get(b, &lat, paths[i%len(paths)])
			i++
		}
		lat.report(b)
	})
}
