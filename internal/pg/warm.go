package pg

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/clock"
)

// warm opens n of pool's connections before Open returns (pgxpool opens
// its minimum in the background, after the first requests may already have
// come): the first second of a sale does not wait for connections to be
// made, nor (with PoolConfig.Warm) for them to be warmed. A connection that
// cannot be made now is left to the pool.
func warm(ctx context.Context, pool *pgxpool.Pool, n int) {
	conns := make([]*pgxpool.Conn, n)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			if c, err := pool.Acquire(ctx); err == nil {
				conns[i] = c
			}
		})
	}
	wg.Wait()
	for _, c := range conns {
		if c != nil {
			c.Release()
		}
	}
}

// WarmFunc runs the hot statements once on a new connection, writing
// nothing that outlives it, and reports whether the connection is now warm
// (false: it could only do part, e.g. the database has nothing to run them
// on yet; it is tried again later).
type WarmFunc func(ctx context.Context, c *pgx.Conn) bool

// RolledBack runs fn in a transaction of c that is rolled back whatever fn
// does, so nothing of it outlives the call, and in which a lock is waited
// for at most 100 ms (a warm-up never holds up a sale in another process).
// It reports fn's answer, false when the transaction could not start: for
// WarmFuncs that run a write path to have it compiled and planned.
func RolledBack(ctx context.Context, c *pgx.Conn, fn func(tx pgx.Tx) bool) bool {
	tx, err := c.Begin(ctx)
	if err != nil {
		return false
	}
	defer func() { _ = tx.Rollback(ctx) }() // nothing to keep: the point is the rollback
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '100ms'`); err != nil {
		return false
	}
	return fn(tx)
}

// warmTimeout bounds one warm-up of one connection.
const warmTimeout = 5 * time.Second

// Warmer warms a pool's connections. A new PostgreSQL backend pays on its
// first call of each statement and function for what every later call
// finds cached: its catalog caches, PL/pgSQL's compilation of a function
// and the plans of the statements inside it, the plans of the foreign-key
// checks its writes fire, and pgx's preparation of the statement (a round
// trip of its own). On a loaded two-core machine that is 50–100 ms for
// the first hold on a backend against 3–5 ms for the next; in a sale's
// first second every connection pays it at once. The Warmer pays it when
// the connection is made, before the pool hands it out (pgxpool's
// AfterConnect) while Open fills the pool, and in the background (Run)
// on every connection made later, and again on those whose warm-up could
// do only part.
//
// Once the pool serves, a new connection is handed out cold and warmed
// later, when idle, never in AfterConnect: warm-ups run one at a time, so
// a pool that must remake its connections at once (a restarted database, a
// pooler closing them) would have each acquire wait for every warm-up
// queued before its own (a second and more on a loaded machine), past the
// shed budget and the clients' patience. A cold connection only makes its
// first hold slower.
type Warmer struct {
	fn WarmFunc
	// one warm-up at a time: they would queue on the same rows (the one
	// seat and fare they hold, each for a moment) and give up.
	one sync.Mutex
	// serving: Open has returned; AfterConnect no longer warms.
	serving atomic.Bool

	mu sync.Mutex
	// cold: the connections not warm yet, each with whether a warm-up was
	// tried on it (and did only part) or not yet.
	cold map[*pgx.Conn]bool
	warm map[*pgx.Conn]struct{}
}

// NewWarmer makes a Warmer that runs fn on each connection.
func NewWarmer(fn WarmFunc) *Warmer {
	return &Warmer{fn: fn, cold: map[*pgx.Conn]bool{}, warm: map[*pgx.Conn]struct{}{}}
}

// afterConnect warms a new connection while Open fills the pool, and
// leaves it to Run's next pass after that. It never refuses one: a warm-up
// is an optimisation, and a connection it could not warm still serves.
func (w *Warmer) afterConnect(ctx context.Context, c *pgx.Conn) error {
	if w.serving.Load() {
		w.mark(c, false, false)
		return nil
	}
	w.try(ctx, c)
	return nil
}

// try warms c once, records the outcome and reports whether c is warm.
func (w *Warmer) try(ctx context.Context, c *pgx.Conn) bool {
	w.one.Lock()
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	ok := w.fn(ctx, c)
	cancel()
	w.one.Unlock()
	w.mark(c, ok, true)
	return ok
}

// mark records c as warm, or as cold: tried says whether a warm-up ran on
// it.
func (w *Warmer) mark(c *pgx.Conn, warm, tried bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if warm {
		delete(w.cold, c)
		w.warm[c] = struct{}{}
	} else {
		w.cold[c] = tried
	}
}

// forget drops a connection the pool closes.
func (w *Warmer) forget(c *pgx.Conn) {
	w.mu.Lock()
	delete(w.cold, c)
	delete(w.warm, c)
	w.mu.Unlock()
}

// Counts reports how many of the pool's open connections are warm and how
// many are not yet.
func (w *Warmer) Counts() (warm, cold int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.warm), len(w.cold)
}

// Run warms, every interval until ctx ends, the idle connections made
// while serving and those whose warm-up did only part (as when berth
// started before the flights it sells existed). While every connection is
// warm it touches nothing.
func (w *Warmer) Run(ctx context.Context, pool *pgxpool.Pool, every time.Duration) {
	clock.Every(ctx, every, func() { w.Pass(ctx, pool) })
}

// Pass warms the idle connections that are not warm yet, one at a time,
// each taken from the pool only for its own warm-up. Every connection not
// tried yet (made while serving) is tried, whatever the others' outcome:
// it runs the whole warm-up and does the parts it can. Of the connections
// tried before and still not warm, one is tried again, and the pass goes
// on to the next only if it warmed this time: a database with nothing to
// warm on costs one short transaction a pass.
func (w *Warmer) Pass(ctx context.Context, pool *pgxpool.Pool) {
	for range pool.Config().MaxConns {
		if _, cold := w.Counts(); cold == 0 {
			return
		}
		pick, retry := w.pickCold(ctx, pool)
		if pick == nil {
			return
		}
		warmed := w.try(ctx, pick.Conn())
		pick.Release()
		if retry && !warmed {
			return
		}
	}
}

// pickCold takes an idle connection that is not warm, one never tried
// first, and reports whether it was tried before; nil when there is none.
func (w *Warmer) pickCold(ctx context.Context, pool *pgxpool.Pool) (pick *pgxpool.Conn, tried bool) {
	idle := pool.AcquireAllIdle(ctx)
	w.mu.Lock()
	for _, pc := range idle {
		t, cold := w.cold[pc.Conn()]
		if cold && (pick == nil || tried && !t) {
			pick, tried = pc, t
		}
	}
	w.mu.Unlock()
	for _, pc := range idle {
		if pc != pick {
			pc.Release()
		}
	}
	return pick, tried
}
