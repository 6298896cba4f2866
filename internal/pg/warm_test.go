package pg_test

import (
	"context"
	"sync"
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

// A pass tries the warm-up on every connection made while serving, even
// when the others' did only part (on a marketplace with no flight to hold
// on, each still gets its car search), and of the connections tried before
// and still cold it tries one again, and no more while that one fails.
func TestPassTriesEachNewConnectionAndRetriesOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	tries := map[*pgx.Conn]int{}
	w := pg.NewWarmer(func(_ context.Context, c *pgx.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		tries[c]++
		return false // never more than part: nothing to hold on
	})
	pool, err := pg.Open(ctx, pgtest.NewURL(t), pg.PoolConfig{MaxConns: 4, MinConns: 1, Warm: w})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var conns []*pgxpool.Conn
	for range 4 { // the three the pool makes now are handed out untried
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	count := func() (conns, calls int) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range tries {
			calls += n
		}
		return len(tries), calls
	}
	opened, _ := count() // Open's own connections, tried while Open filled the pool
	if opened < 1 || opened >= 4 {
		t.Fatalf("%d connections tried while Open filled the pool, want its minimum (1) and not all 4", opened)
	}
	w.Pass(ctx, pool)
	if n, calls := count(); n != 4 || calls != 5 {
		t.Errorf("after a pass: %d connections tried, %d warm-ups in all; want 4 and 5 "+
			"(Open's once each, the new ones once each, then one of Open's again)", n, calls)
	}
	w.Pass(ctx, pool)
	if _, calls := count(); calls != 6 {
		t.Errorf("after a second pass: %d warm-ups in all, want 6 (one retry)", calls)
	}
	if warm, cold := w.Counts(); warm != 0 || cold != 4 {
		t.Errorf("%d warm, %d cold; want all 4 cold", warm, cold)
	}
}
