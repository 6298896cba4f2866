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
	results, err := audit.Run(context.Background(), pool, audit.Options{Now: now, SweepInterval: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.ID == "I3" {
			return r
		}
	}
	t.Fatal("no I3 in the audit")
	return audit.Result{}
}

// I3 finds overlapping live car bookings, turnaround included, on its own:
// the exclusion constraint is dropped here so that they can exist.
func TestI3FindsOverlapsIncludingTurnaround(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
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
