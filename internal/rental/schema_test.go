package rental_test

import (
	"context"
	"testing"
	"time"

	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// The blocked range is the database's: whatever a writer puts there, the
// trigger sets it to the period plus the car's turnaround, and a car
// booking cannot name a car that does not exist.
func TestSchemaComputesBlocked(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `INSERT INTO car (host_id, plate, model, city, daily_price, deposit, currency, turnaround, created_at)
		VALUES (9, '30A-000.01', 'Kia Morning', 'HN', 100, 100, 'VND', interval '90 minutes', $1)`, now); err != nil {
		t.Fatal(err)
	}
	insert := func(carID int64, blocked string) error {
		_, err := pool.Exec(ctx, `INSERT INTO booking (kind, status, customer_id, host_id, amount, currency, hold_expires_at,
				starts_at, refund_rule, car_id, period, blocked, rental_price, created_at, updated_at)
			VALUES ('car', 'CONFIRMED', 1, 9, 100, 'VND', $1, '2026-12-10T08:00:00+07:00', '[]', $2,
				tstzrange('2026-12-10T08:00:00+07:00', '2026-12-10T20:00:00+07:00', '[)'), $3::tstzrange, 100, $1, $1)`,
			now, carID, blocked)
		return err
	}
	if err := insert(1, "[2026-12-10 01:00:00+00,2026-12-10 02:00:00+00)"); err != nil {
		t.Fatal(err)
	}
	blocked := func() string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT blocked::text FROM booking WHERE id = 1`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	const want = `["2026-12-10 01:00:00+00","2026-12-10 14:30:00+00")`
	if got := blocked(); got != want {
		t.Errorf("blocked after insert = %s, want %s", got, want)
	}
	if _, err := pool.Exec(ctx, `UPDATE booking SET blocked = period WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if got := blocked(); got != want {
		t.Errorf("blocked after overwriting it = %s, want %s", got, want)
	}
	if err := insert(2, "empty"); !pg.Violates(err, "booking_car_fkey") || pg.State(err) != pg.ForeignKeyViolation {
		t.Errorf("a booking of a car that does not exist: %v, want booking_car_fkey", err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO booking (kind, status, customer_id, amount, currency, hold_expires_at, starts_at,
			refund_rule, flight_id, fare_class, quantity, car_id, created_at, updated_at)
		VALUES ('flight', 'HELD', 1, 100, 'VND', $1, $1, '[]', 1, 'ECONOMY', 1, 1, $1, $1)`, now)
	// booking_not_car_check refuses it, unless a flight check sorts first.
	if pg.State(err) != pg.CheckViolation {
		t.Errorf("a flight booking with a car: %v, want a check violation", err)
	}
}
