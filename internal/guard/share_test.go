package guard_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/guard"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// sharedPool opens a pool of maxConns connections traced by a tracer whose
// holds may have one connection at once, and counts its shed acquires.
func sharedPool(t *testing.T, maxConns int32) (*pgxpool.Pool, *atomic.Int64) {
	t.Helper()
	var sheds atomic.Int64
	tracer := &guard.AcquireTracer{OnShed: func() { sheds.Add(1) }}
	tracer.ShareHolds(1)
	pool, err := pg.Open(context.Background(), pgtest.NewURL(t), pg.PoolConfig{MaxConns: maxConns, Tracer: tracer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, &sheds
}

// Holds queued for the holds' share wait their turn while holds keep giving
// their connections back, even when the queue takes longer than the budget:
// a crowd racing for one car is served in order, not answered 503. Here the
// share is one connection, and eight holds each keep it a moment: the last
// ones wait well past the budget (but within its hard bound of four).
func TestHoldShareWaitersServedWhileTheShareMoves(t *testing.T) {
	t.Parallel()
	pool, sheds := sharedPool(t, 2)
	const budget = 300 * time.Millisecond
	ctx := guard.WithHoldShare(guard.WithAcquireBudget(context.Background(), budget))
	first, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 8
	errs := make(chan error, waiters)
	var wg sync.WaitGroup
	for range waiters {
		wg.Go(func() {
			c, err := pool.Acquire(ctx)
			if err == nil {
				time.Sleep(budget / 8)
				c.Release()
			}
			errs <- err
		})
	}
	time.Sleep(budget / 2)
	first.Release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a hold waiting its turn for the moving share: %v, want a connection", err)
		}
	}
	if n := sheds.Load(); n != 0 {
		t.Errorf("%d acquires shed, want none", n)
	}
}

// A share that does not move (every hold's connection stuck) sheds its
// waiter after the budget with 503 overloaded, while the holds stay stuck,
// even though the rest of the pool keeps handing out connections: the
// share's progress is its own holds coming back.
func TestHoldShareStalledSheds(t *testing.T) {
	t.Parallel()
	pool, sheds := sharedPool(t, 3)
	bg := context.Background()
	ctx := guard.WithHoldShare(guard.WithAcquireBudget(bg, 100*time.Millisecond))
	stuck, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Release()
	done := make(chan error, 1)
	go func() {
		c, err := pool.Acquire(ctx)
		if err == nil {
			c.Release()
		}
		done <- err
	}()
	// Everything else keeps moving (bounded: the waiter gives up long
	// before this many acquires, or the test's timeout ends it).
	var waited error
	got := false
	for i := 0; i < 100000 && !got; i++ {
		select {
		case waited = <-done:
			got = true
		default:
			c, err := pool.Acquire(guard.WithAcquireBudget(bg, time.Second))
			if err != nil {
				t.Fatal(err)
			}
			c.Release()
		}
	}
	if !got {
		waited = <-done
	}
	if waited == nil {
		t.Fatal("a hold got a connection while the holds' share was stuck")
	}
	if e := guard.AsOverload(ctx, waited); !fault.Is(e, fault.Overloaded) {
		t.Errorf("the shed hold's error: %v, want 503 overloaded", e)
	}
	if n := sheds.Load(); n != 1 {
		t.Errorf("%d acquires shed, want 1", n)
	}
}
