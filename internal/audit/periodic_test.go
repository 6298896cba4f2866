package audit_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/audit"
	"berth.dev/berth/internal/pg/pgtest"
)

// TestPeriodicAuditExportsViolations: a broken invariant shows in
// berth_audit_violations on every process, and processes sharing a
// database audit once per interval between them.
func TestPeriodicAuditExportsViolations(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	o := audit.Options{SweepInterval: 30 * time.Second}
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := audit.NewPeriodic(pool, clock, o, 10*time.Minute, slog.New(slog.DiscardHandler), regA)
	b := audit.NewPeriodic(pool, clock, o, 10*time.Minute, slog.New(slog.DiscardHandler), regB)

	violations := func(reg *prometheus.Registry, id string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "berth_audit_violations" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == id {
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatalf("no berth_audit_violations{invariant=%q}", id)
		return 0
	}
	// Before any audit every invariant is exported as 0, so an alert on
	// > 0 has a series to watch from the start.
	if v := violations(regA, "I7"); v != 0 {
		t.Fatalf("I7 before the first audit = %v", v)
	}
	if ran, err := a.Pass(ctx); err != nil || !ran {
		t.Fatalf("first pass: ran %v, %v", ran, err)
	}
	if v := violations(regA, "I7"); v != 0 {
		t.Fatalf("I7 on an empty database = %v", v)
	}

	// A hold left unswept far past its expiry breaks I7.
	if _, err := pool.Exec(ctx, `INSERT INTO car (host_id, plate, model, city, daily_price, deposit, currency, turnaround, created_at)
		VALUES (9, '30A-000.02', 'Kia Morning', 'HN', 100, 100, 'VND', interval '1 hour', $1)`, now); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO booking (kind, status, customer_id, host_id, amount, currency, hold_expires_at, starts_at,
			refund_rule, car_id, period, rental_price, created_at, updated_at)
		VALUES ('car', 'HELD', 1, 9, 100, 'VND', $1::timestamptz - interval '1 hour', $1::timestamptz + interval '1 day', '[]', 1,
			tstzrange($1::timestamptz + interval '1 day', $1::timestamptz + interval '2 days', '[)'), 100, $1, $1)`, now); err != nil {
		t.Fatal(err)
	}
	// Within the interval neither process audits again.
	now = now.Add(5 * time.Minute)
	if ran, err := b.Pass(ctx); err != nil || ran {
		t.Fatalf("pass within the interval: ran %v, %v", ran, err)
	}
	now = now.Add(6 * time.Minute)
	if ran, err := b.Pass(ctx); err != nil || !ran {
		t.Fatalf("pass after the interval: ran %v, %v", ran, err)
	}
	if ran, err := a.Pass(ctx); err != nil || ran {
		t.Fatalf("the other process audited again: ran %v, %v", ran, err)
	}
	for name, reg := range map[string]*prometheus.Registry{"b (audited)": regB, "a (read the record)": regA} {
		if v := violations(reg, "I7"); v != 1 {
			t.Errorf("process %s: berth_audit_violations{invariant=I7} = %v, want 1", name, v)
		}
	}
	for _, id := range []string{"I1", "I2", "I3", "I4", "I5", "I6", "I7"} {
		violations(regA, id) // fails the test when one is missing
	}
}
