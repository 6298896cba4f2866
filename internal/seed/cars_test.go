package seed_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/audit"
	"berth.dev/berth/internal/pg/pgtest"
	"berth.dev/berth/internal/seed"
)

// A small fleet loads with a history in every status, that keeps every
// invariant, and loading it again does nothing.
func TestLoadCars(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	c := seed.CarDefaults(now)
	c.Cars, c.Bookings, c.Popular, c.EventRetention = 300, 3000, 10, 7*24*time.Hour
	cars, bookings, err := seed.LoadCars(ctx, pool, c)
	if err != nil {
		t.Fatal(err)
	}
	if cars != 300 || bookings < 2700 || bookings > 3300 {
		t.Errorf("loaded %d cars and %d bookings, want 300 and about 3000", cars, bookings)
	}
	var stored, statuses, cities, pastLive, futureDone int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT status),
			(SELECT count(DISTINCT city) FROM car),
			count(*) FILTER (WHERE upper(period) <= $1 AND status IN ('HELD', 'CONFIRMED', 'ON_TRIP')),
			count(*) FILTER (WHERE lower(period) > $1 AND status IN ('COMPLETED', 'ON_TRIP'))
		FROM booking WHERE kind = 'car'`, now).Scan(&stored, &statuses, &cities, &pastLive, &futureDone); err != nil {
		t.Fatal(err)
	}
	if stored != bookings || statuses != 5 || cities != 8 || pastLive != 0 || futureDone != 0 {
		t.Errorf("%d bookings stored in %d statuses, %d cities, %d past live, %d future done", stored, statuses, cities, pastLive, futureDone)
	}
	results, err := audit.Run(ctx, pool, audit.Options{Now: now, SweepInterval: 30 * time.Second, EventRetention: c.EventRetention})
	if err != nil {
		t.Fatal(err)
	}
	if audit.Failed(results) {
		t.Errorf("audit of the seeded fleet:\n%s", audit.Format(results))
	}
	if cars, bookings, err := seed.LoadCars(ctx, pool, c); err != nil || cars != 0 || bookings != 0 {
		t.Errorf("second load: %d cars, %d bookings, %v; want nothing", cars, bookings, err)
	}
}

// The history's event retention is BERTH_EVENT_RETENTION's value, passed
// in: LoadCars has no default of its own and refuses zero.
func TestLoadCarsRefusesZeroRetention(t *testing.T) {
	t.Parallel()
	c := seed.CarDefaults(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	c.Cars, c.Bookings = 3, 3
	if _, _, err := seed.LoadCars(context.Background(), pgtest.NewPool(t), c); err == nil || !strings.Contains(err.Error(), "EventRetention") {
		t.Errorf("LoadCars without a retention: %v, want an error naming EventRetention", err)
	}
}
