package rental_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/idempotency"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
	"berth.dev/berth/internal/rental"
)

// A car hold is one round trip, whatever it checks and records: one
// statement, hold_car, in autocommit, which takes the customer's hold
// limit, locks the car, reads its calendar, inserts the booking and writes
// its event and its Idempotency-Key's effect. So is a batch of several
// holds of one car, and a hold under a new key, whose claim is pipelined
// with it. The other car tests check what they decide; this one
// fails if a step goes back to a round trip of its own, or a batch to a
// statement per hold.
func TestCarHoldRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counter := &pgtest.RoundTrips{}
	pool, err := pg.Open(ctx, pgtest.NewURL(t), pg.PoolConfig{MaxConns: 2, Tracer: counter})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	now := time.Now()
	var carID int64
	if err := pool.QueryRow(ctx, `INSERT INTO car (host_id, plate, model, city, daily_price, deposit, currency, turnaround, created_at)
		VALUES (9, '30A-000.02', 'Kia Morning', 'HN', 100, 100, 'VND', interval '2 hours', $1) RETURNING id`, now).Scan(&carID); err != nil {
		t.Fatal(err)
	}
	const lease = "00000000-0000-4000-8000-000000000001"
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_key (caller_id, idem_key, method, path, request_hash, lease, locked_until, created_at, expires_at)
		VALUES (7, 'k', 'POST', '/bookings', '\x00', $1, $2, $3, $2)`, lease, now.Add(time.Minute), now); err != nil {
		t.Fatal(err)
	}
	svc := newServiceWith(pool, rental.Config{HoldTTL: 15 * time.Minute,
		HoldLimit: booking.HoldLimit{N: 3, Window: 15 * time.Minute}})
	claimed := pg.WithKeyClaim(ctx, pg.KeyClaim{CallerID: 7, Key: "k", Lease: lease})
	from := now.Add(72 * time.Hour).Truncate(time.Hour)
	expect := func(what string, before int) {
		t.Helper()
		trips := counter.Taken()[before:]
		if len(trips) != 1 || !strings.Contains(trips[0], "hold_car(") {
			t.Errorf("%s made %d round trips, want 1 (hold_car):", what, len(trips))
			for _, s := range trips {
				t.Logf("  %.80s", s)
			}
		}
	}
	before := counter.Len()
	if _, err := svc.Hold(claimed, rental.HoldRequest{CustomerID: 7, CarID: carID, From: from, To: from.Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	expect("a car hold", before)
	before = counter.Len()
	var reqs []rental.HoldRequest
	for k := range 3 {
		start := from.Add(time.Duration(k+2) * 48 * time.Hour)
		reqs = append(reqs, rental.HoldRequest{CustomerID: int64(8 + k), CarID: carID, From: start, To: start.Add(24 * time.Hour)})
	}
	bs, errs, err := svc.HoldTogether(ctx, carID, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		if errs[i] != nil || bs[i] == nil {
			t.Errorf("hold %d of the batch: %v", i, errs[i])
		}
	}
	expect("a batch of three car holds", before)
	var effect string
	if err := pool.QueryRow(ctx, `SELECT coalesce(effect, '') FROM idempotency_key WHERE caller_id = 7 AND idem_key = 'k'`).Scan(&effect); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(effect, "booking:") {
		t.Errorf("the key's effect is %q, want the booking", effect)
	}

	// Under a new key, the key's claim is pipelined with the hold: one
	// round trip, one commit, and the booking is the key's effect.
	claim := idempotency.Pending(idempotency.NewRequest(7, "new-key", "POST", "/bookings", []byte(`{}`)))
	before = counter.Len()
	start := from.Add(20 * 24 * time.Hour)
	b, err := svc.Hold(pg.WithKeyClaim(ctx, claim), rental.HoldRequest{CustomerID: 7, CarID: carID, From: start, To: start.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if trips := counter.Taken()[before:]; len(trips) != 1 || trips[0] != "pipeline" {
		t.Errorf("a car hold under a new key made the round trips %q, want one pipeline", trips)
	}
	var newLease string
	if err := pool.QueryRow(ctx, `SELECT effect, lease::text FROM idempotency_key WHERE caller_id = 7 AND idem_key = 'new-key'`).
		Scan(&effect, &newLease); err != nil {
		t.Fatal(err)
	}
	if effect != booking.EffectOf(b.ID) || newLease != claim.Lease {
		t.Errorf("the new key's effect %q and lease %s, want %q and %s", effect, newLease, booking.EffectOf(b.ID), claim.Lease)
	}
}
