package idempotency_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"berth.dev/berth/internal/base"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/idempotency"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// A claim and its answer commit without waiting for the disk, and only
// they do: the session they ran on is back to waiting for it, so the next
// transaction there (a hold, a payment) is durable when it commits. Both
// run on the pool's one connection; the answer is then replayed.
func TestClaimAndAnswerLeaveTheSessionDurable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pg.Open(ctx, pgtest.NewURL(t), pg.PoolConfig{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	keys := idempotency.New(base.Test(clock.NewFake(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))), pool)
	durable := func(after string) {
		t.Helper()
		var v string
		if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != "on" {
			t.Errorf("after %s the session's synchronous_commit is %q, want on", after, v)
		}
	}
	durable("nothing")

	q := idempotency.NewRequest(7, "key-1", http.MethodPost, "/bookings", []byte(`{"carId":1}`))
	lease, replay, err := keys.Claim(ctx, q, nil)
	if err != nil || replay != nil || lease == "" {
		t.Fatalf("claim: lease %q, replay %v, %v", lease, replay, err)
	}
	durable("the claim")
	keys.Settle(q, lease, &idempotency.Answer{Status: http.StatusCreated, Body: []byte(`{"id":1}`)}, time.Time{})
	durable("the answer")

	_, replay, err = keys.Claim(ctx, q, nil)
	if err != nil || replay == nil || replay.Status != http.StatusCreated || string(replay.Body) != `{"id":1}` {
		t.Fatalf("replay: %+v, %v; want the stored 201", replay, err)
	}
}
