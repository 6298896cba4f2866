package audit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/audit"
	"berth.dev/berth/internal/pg/pgtest"
)

func i3(t *testing.T, pool *pgxpool.Pool, now time.Time) audit.Result {
	t.Helper()
	return result(t, pool, now, "I3")
}

// I3 finds overlapping live car bookings, turnaround included, on its own:
// the exclusion constraint is dropped here so that they can exist.
func TestI3FindsOverlapsIncludingTurnaround(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	exec := execer(t, pool)
	exec(`ALTER TABLE booking DROP CONSTRAINT booking_car_no_overlap`)
	exec(`INSERT INTO car (host_id, plate, model, city, daily_price, deposit, currency, turnaround, created_at)
		VALUES (9, '30A-000.01', 'Kia Morning', 'HN', 100, 100, 'VND', interval '2 hours', $1)`, now)
	book := func(status, from, to string) {
		t.Helper()
		var reason any
		if status == "CANCELLED" {
			reason = "customer"
		}
		exec(`INSERT INTO booking (kind, status, customer_id, host_id, amount, currency, hold_expires_at, starts_at,
				refund_rule, car_id, period, rental_price, cancel_reason, created_at, updated_at)
			VALUES ('car', $1, 1, 9, 100, 'VND', $5, $2::timestamptz, '[]', 1, tstzrange($2::timestamptz, $3::timestamptz, '[)'), 100, $4, $5, $5)`,
			status, from, to, reason, now)
	}
	book("CONFIRMED", "2026-12-10T08:00:00+07:00", "2026-12-10T20:00:00+07:00")
	book("CONFIRMED", "2026-12-10T22:00:00+07:00", "2026-12-11T08:00:00+07:00")
	book("CANCELLED", "2026-12-10T21:00:00+07:00", "2026-12-10T21:30:00+07:00")
	if r := i3(t, pool, now); !r.OK {
		t.Fatalf("I3 on bookings that touch only at the turnaround's end: %v", r.Violations)
	}
	book("HELD", "2026-12-10T21:00:00+07:00", "2026-12-10T21:30:00+07:00")
	r := i3(t, pool, now)
	if r.OK || r.Count != 2 || !strings.Contains(r.Violations[0], "car 1: booking 1") {
		t.Errorf("I3 with a hold inside the turnaround on both sides: ok=%v %d %v, want 2 violations", r.OK, r.Count, r.Violations)
	}

	// A blocked range that is not period plus turnaround is a violation
	// too, whoever wrote it.
	exec(`DELETE FROM booking WHERE status = 'HELD'`)
	exec(`ALTER TABLE booking DISABLE TRIGGER booking_car_blocked`)
	exec(`UPDATE booking SET blocked = period WHERE id = 1`)
	r = i3(t, pool, now)
	if r.OK || r.Count != 1 || !strings.Contains(r.Violations[0], "booking 1 of car 1 blocks") {
		t.Errorf("I3 with a blocked range lacking the turnaround: ok=%v %v", r.OK, r.Violations)
	}
}

func result(t *testing.T, pool *pgxpool.Pool, now time.Time, id string) audit.Result {
	t.Helper()
	results, err := audit.Run(context.Background(), pool, audit.Options{Now: now, SweepInterval: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no %s in the audit", id)
	return audit.Result{}
}

// I8 finds a fitting entry left waiting beside free units, and an offered
// entry whose booking is no longer a live hold, written here by hand past
// the code that would never leave them.
func TestI8FindsAWaitingEntryBesideFreeUnitsAndADeadOffer(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	exec := execer(t, pool)
	exec(`INSERT INTO flight (code, origin, destination, departure_at, arrival_at, departure_date)
		VALUES ('VN1', 'SGN', 'HAN', $1::timestamptz, $2, $1::timestamptz::date)`, now.Add(48*time.Hour), now.Add(50*time.Hour))
	exec(`WITH f AS (INSERT INTO fare_inventory (flight_id, fare_class, price, currency, capacity, refund_rule)
			VALUES (1, 'ECONOMY', 100, 'VND', 2, '[]') RETURNING flight_id, fare_class)
		INSERT INTO fare_bucket (flight_id, fare_class, bucket, quota, held) SELECT flight_id, fare_class, 0, 2, 1 FROM f`)
	exec(`INSERT INTO booking (kind, status, customer_id, amount, currency, hold_expires_at, starts_at, refund_rule,
			flight_id, fare_class, quantity, fare_bucket, created_at, updated_at)
		VALUES ('flight', 'HELD', 5, 100, 'VND', $1, $2, '[]', 1, 'ECONOMY', 1, 0, $3, $3)`, now.Add(10*time.Minute), now.Add(48*time.Hour), now)
	exec(`INSERT INTO waitlist (flight_id, fare_class, customer_id, quantity, created_at, updated_at) VALUES (1, 'ECONOMY', 7, 2, $1, $1)`, now)
	if r := result(t, pool, now, "I8"); !r.OK {
		t.Fatalf("I8 with 1 unit free and an entry of 2 waiting: %v", r.Violations)
	}
	exec(`INSERT INTO waitlist (flight_id, fare_class, customer_id, quantity, created_at, updated_at) VALUES (1, 'ECONOMY', 8, 1, $1, $1)`, now)
	r := result(t, pool, now, "I8")
	if r.OK || r.Count != 1 || !strings.Contains(r.Violations[0], "1 units free while waitlist entry 2 waits for 1") {
		t.Errorf("I8 with 1 unit free and an entry of 1 waiting: ok=%v %v", r.OK, r.Violations)
	}
	exec(`UPDATE waitlist SET status = 'OFFERED', booking_id = 1 WHERE id = 2`)
	exec(`UPDATE waitlist SET customer_id = 5, quantity = 1 WHERE id = 2`)
	exec(`UPDATE booking SET status = 'EXPIRED'`)
	r = result(t, pool, now, "I8")
	if r.OK || !strings.Contains(strings.Join(r.Violations, "\n"), "waitlist entry 2 is OFFERED with booking 1, which is EXPIRED") {
		t.Errorf("I8 with an offer that expired but an entry still OFFERED: ok=%v %v", r.OK, r.Violations)
	}
}

// execer returns a function that runs a statement on pool, failing t on
// an error.
func execer(t *testing.T, pool *pgxpool.Pool) func(sql string, args ...any) {
	return func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
			t.Fatal(err)
		}
	}
}
