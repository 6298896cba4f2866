package flight_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/flight"
	"berth.dev/berth/internal/pg/pgtest"
	"berth.dev/berth/internal/policy"
)

// benchFlight inserts a flight departing in a week with one ECONOMY class
// of rows×letters seats and a quota of quota units, and returns its id.
func benchFlight(b testing.TB, pool *pgxpool.Pool, rows int, letters string, quota int) int64 {
	b.Helper()
	ctx := context.Background()
	rule, _ := json.Marshal(policy.FlightDefault)
	var id int64
	dep := time.Now().Add(7 * 24 * time.Hour)
	err := pool.QueryRow(ctx, `INSERT INTO flight (code, origin, destination, departure_at, arrival_at, departure_date)
		VALUES ('VN' || (1000 + (random() * 90000)::int), 'SGN', 'HAN', $1::timestamptz, $2, $1::timestamptz::date) RETURNING id`,
		dep, dep.Add(2*time.Hour)).Scan(&id)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `WITH fare AS (
			INSERT INTO fare_inventory (flight_id, fare_class, price, currency, capacity, refund_rule)
			VALUES ($1, 'ECONOMY', 1500000, 'VND', $2, $3) RETURNING flight_id, fare_class, capacity)
		INSERT INTO fare_bucket (flight_id, fare_class, bucket, quota) SELECT flight_id, fare_class, 0, capacity FROM fare`,
		id, quota, rule); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO seat (flight_id, seat_no, fare_class)
		SELECT $1, r || l, 'ECONOMY' FROM generate_series(1, $2) r, unnest(string_to_array($3, NULL)) l`,
		id, rows, letters); err != nil {
		b.Fatal(err)
	}
	return id
}

const letters = "ABCDEFGHJKLMNPQRSTUVWXYZ" // 24 seats a row, 999 rows: 23,976 seats

// BenchmarkHoldHotFlight measures holds on one flight by many goroutines at
// once (GOMAXPROCS × 16): "alone" gives each hold its own transaction (the
// design every request pays without the surge layers), "coalesced" shares
// transactions between concurrent holds. Compare the sub-benchmarks side by
// side; absolute numbers depend on the machine's disk and cores.
func BenchmarkHoldHotFlight(b *testing.B) {
	bothModes(b, benchHolds)
}

// bothModes runs bench as sub-benchmarks "alone" (a transaction per hold)
// and "coalesced", each with its own service on one test database.
func bothModes(b *testing.B, bench func(b *testing.B, pool *pgxpool.Pool, svc *flight.Service)) {
	pool := pgtest.NewPool(b)
	for _, coalesce := range []bool{false, true} {
		name := "alone"
		if coalesce {
			name = "coalesced"
		}
		svc := flight.NewService(pool, clock.System{}, flight.Config{HoldTTL: 10 * time.Minute, SeatMapTTL: time.Second,
			Coalesce: coalesce})
		b.Run(name, func(b *testing.B) { bench(b, pool, svc) })
	}
}

func benchHolds(b *testing.B, pool *pgxpool.Pool, svc *flight.Service) {
	ctx := context.Background()
	b.Run("seat", func(b *testing.B) {
		seatsPer := 999 * len(letters)
		var ids []int64
		for range b.N/seatsPer + 1 {
			ids = append(ids, benchFlight(b, pool, 999, letters, seatsPer))
		}
		var next atomic.Int64
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := int(next.Add(1) - 1)
				seat := fmt.Sprintf("%d%c", i%seatsPer/len(letters)+1, letters[i%len(letters)])
				if _, err := svc.Hold(ctx, flight.HoldRequest{CustomerID: int64(i + 1), FlightID: ids[i/seatsPer],
					FareClass: "ECONOMY", Seats: []string{seat}}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "holds/s")
	})
	b.Run("quantity", func(b *testing.B) {
		id := benchFlight(b, pool, 1, "A", 10_000_000)
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := svc.Hold(ctx, flight.HoldRequest{CustomerID: 1, FlightID: id, FareClass: "ECONOMY", Quantity: 1}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "holds/s")
	})
}

// BenchmarkSeatMap measures reading a 180-seat map from the database on
// every call (cache TTL of a nanosecond) and from the 2 s cache.
func BenchmarkSeatMap(b *testing.B) {
	pool := pgtest.NewPool(b)
	id := benchFlight(b, pool, 30, "ABCDEF", 180)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"uncached", time.Nanosecond}, {"cached", 2 * time.Second}} {
		svc := flight.NewService(pool, clock.System{}, flight.Config{HoldTTL: time.Minute, SeatMapTTL: tc.ttl})
		b.Run(tc.name, func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					m, err := svc.SeatMap(ctx, id)
					if err != nil || len(m.Seats) != 180 {
						b.Errorf("seat map: %v (%d seats)", err, len(m.Seats))
						return
					}
				}
			})
		})
	}
}

// BenchmarkHoldLone measures one caller holding seats one at a time on a
// flight nobody else holds, a quiet day: "alone" is a transaction per
// hold, "coalesced" the same hold through the coalescer, which should cost
// nothing more when there is nobody to batch with. It reports the median
// hold; compare the two side by side.
func BenchmarkHoldLone(b *testing.B) {
	bothModes(b, func(b *testing.B, pool *pgxpool.Pool, svc *flight.Service) {
		ctx := context.Background()
		seatsPer := 999 * len(letters)
		var ids []int64
		for range b.N/seatsPer + 1 {
			ids = append(ids, benchFlight(b, pool, 999, letters, seatsPer))
		}
		lat := make([]time.Duration, b.N)
		b.ResetTimer()
		for i := range b.N {
			seat := fmt.Sprintf("%d%c", i%seatsPer/len(letters)+1, letters[i%len(letters)])
			start := time.Now()
			if _, err := svc.Hold(ctx, flight.HoldRequest{CustomerID: int64(i + 1), FlightID: ids[i/seatsPer],
				FareClass: "ECONOMY", Seats: []string{seat}}); err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(start)
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	})
}
