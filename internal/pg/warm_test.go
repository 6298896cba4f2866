package pg_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// Open returns with the pool's minimum connections already made (pgxpool
// alone makes them in the background, after the first requests may have
// come), ten times over.
func TestOpenMakesTheMinimumConnections(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	for range 10 {
		pool, err := pg.Open(context.Background(), url, pg.PoolConfig{MaxConns: 12, MinConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		n := pool.Stat().IdleConns() // made and waiting (TotalConns counts the ones being made, too)
		pool.Close()
		if n < 8 {
			t.Fatalf("connections when Open returned: %d, want the minimum 8", n)
		}
	}
}

// Once Open has returned, a connection the pool makes is handed out at
// once and warmed later, by a pass, never before the acquire that made it
// gets it: here a warm-up would take until its own timeout, and acquires
// that fill the pool with new connections still get theirs.
func TestConnectionsMadeWhileServingAreWarmedLater(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var stuck atomic.Bool
	release := make(chan struct{})
	w := pg.NewWarmer(func(ctx context.Context, _ *pgx.Conn) bool {
		if stuck.Load() {
			select {
			case <-release:
			case <-ctx.Done():
				return false
			}
		}
		return true
	})
	pool, err := pg.Open(ctx, pgtest.NewURL(t), pg.PoolConfig{MaxConns: 4, MinConns: 1, Warm: w})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	opened, cold := w.Counts()
	if opened < 1 || opened >= 4 || cold != 0 {
		t.Fatalf("when Open returned: %d warm, %d cold; want its minimum connection warm", opened, cold)
	}
	stuck.Store(true)
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var conns []*pgxpool.Conn
	defer func() { // a pool closes only once every connection is back
		for _, c := range conns {
			c.Release()
		}
	}()
	for range 4 {
		c, err := pool.Acquire(actx)
		if err != nil {
			t.Fatalf("acquire of a new connection while a warm-up is stuck: %v", err)
		}
		conns = append(conns, c)
	}
	if _, cold := w.Counts(); cold != 4-opened {
		t.Errorf("%d cold connections after filling the pool, want the %d new ones", cold, 4-opened)
	}
	for _, c := range conns {
		c.Release()
	}
	conns = nil
	close(release)
	w.Pass(ctx, pool)
	if warm, cold := w.Counts(); cold != 0 || warm != 4 {
		t.Errorf("after a pass: %d warm, %d cold; want every idle connection warm", warm, cold)
	}
}
