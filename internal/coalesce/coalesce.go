// Package coalesce turns concurrent requests on one hot row (a flight, a
// car) into one database transaction per batch, like a group commit. It
// decides nothing itself: the Many function given to it sends a batch to
// PostgreSQL, which decides each request.
package coalesce

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/codel"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
)

// Call is one request of a batch: Many reads Ctx and Req and sets Out and
// Err.
type Call[R, T any] struct {
	Ctx    context.Context
	Req    R
	Out    T
	Err    error
	done   chan struct{}
	queued time.Time // when it joined its key's queue
}

// Config sets up a Coalescer.
type Config[K comparable, R, T any] struct {
	// Many decides a batch of requests on key, all in one transaction,
	// each all or nothing: it sets each call's Out or Err. A returned error
	// means nothing of the batch was written, unless the connection was
	// lost once its commit had been sent (see flush).
	Many func(ctx context.Context, key K, batch []*Call[R, T]) error
	// Busy is the error of a request shed because its batch did not start
	// within QueueWait (a 503).
	Busy func(key K) error

	// MaxBatch is the most requests in one batch (at least 1).
	MaxBatch int
	// Flushes is how many batches of one key may run at once (at least 1):
	// one is sent while another's commit is written.
	Flushes int
	// Slots bounds the batches of every key, and of every Coalescer given
	// the same Slots, that run at once (nil: no bound).
	Slots Slots
	// Linger is how long the first request of an idle key waits for others
	// before its batch is sent; 0 sends it at once on the caller's own
	// goroutine.
	Linger time.Duration
	// Regroup is the longest pause after a batch of several requests to
	// let their callers' next requests gather for the next flush.
	Regroup time.Duration
	// QueueWait is the longest a request waits for its batch to start, as
	// a request waits for a database connection; 0 is no bound.
	QueueWait time.Duration
	// Target is the wait for a batch that a busy queue should stay under
	// (0: no target; it needs a QueueWait). When the oldest request of
	// each of a key's batches has waited longer than Target, for a whole
	// QueueWait, the key's queue is standing: its requests come in faster
	// than its batches take them, and each would wait nearly all of
	// QueueWait before its batch, or its 503. Until one of its batches'
	// oldest request has waited less than Target again, or the key goes
	// idle, a request of the key waits at most twice Target: in an
	// overload the shed requests and the others are answered soon, while a
	// burst shorter than QueueWait (a race for one seat) is still waited
	// out in full (package codel). Each key is judged on its own.
	Target time.Duration

	// Metric prefixes the metric names (Metric_size, Metric_fallbacks_total,
	// Metric_shed_total, and Metric_standing with a Target); What says what
	// a request is, in their help.
	Metric, What string
	Registry     prometheus.Registerer
	Log          *slog.Logger
}

// Coalescer batches the requests of each key. The first request of an idle
// key is sent at once, on its caller's goroutine; requests that arrive
// while it runs wait and go together in the next batch, up to MaxBatch.
// One round trip and one commit then serve many requests, and the key's hot
// row is locked once per batch instead of once per request.
type Coalescer[K comparable, R, T any] struct {
	cfg      Config[K, R, T]
	sizes    prometheus.Histogram
	fallback prometheus.Counter
	shed     prometheus.Counter

	// spawned counts the flushing goroutines started.
	spawned atomic.Int64

	mu     sync.Mutex
	queues map[K]*queue[R, T]
	// standing counts the keys whose queue stands (Config.Target); nil
	// without a Target.
	standing prometheus.Gauge
}

// queue is one key's requests waiting for a batch.
type queue[R, T any] struct {
	waiting []*Call[R, T]
	running int // flushes under way
	// line watches how long each batch's oldest request waited
	// (Config.Target); nil without a Target.
	line *codel.Queue
}

// New returns a Coalescer, its metrics registered with cfg.Registry.
func New[K comparable, R, T any](cfg Config[K, R, T]) *Coalescer[K, R, T] {
	cfg.MaxBatch = max(cfg.MaxBatch, 1)
	cfg.Flushes = max(cfg.Flushes, 1)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	c := &Coalescer[K, R, T]{cfg: cfg, queues: map[K]*queue[R, T]{},
		sizes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    cfg.Metric + "_size",
			Help:    cfg.What + " per coalesced batch (one transaction).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}),
		fallback: prometheus.NewCounter(prometheus.CounterOpts{
			Name: cfg.Metric + "_fallbacks_total",
			Help: "Coalesced batches of " + cfg.What + " that failed as a whole and were retried one at a time.",
		}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: cfg.Metric + "_shed_total",
			Help: cfg.What + " answered 503 because their batch did not start within the queue wait.",
		}),
	}
	metrics := []prometheus.Collector{c.sizes, c.fallback, c.shed}
	if cfg.Target > 0 && cfg.QueueWait > 0 {
		c.standing = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: cfg.Metric + "_standing",
			Help: "Keys whose coalescing queue of " + cfg.What + " stands: a request waits at most twice the target for its batch.",
		})
		metrics = append(metrics, c.standing)
	}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(metrics...)
	}
	return c
}

// Slots bounds how many batches run at once, as many as the database
// connections they may use. A batch takes its slot before it takes its
// requests: while every slot is taken, requests wait in their key's queue,
// where QueueWait sheds them, and the batch that starts finds a connection
// free. Without it a batch would take its requests and then wait for a
// connection with them, beyond QueueWait's reach.
type Slots chan struct{}

// NewSlots returns Slots for n batches at once (nil, no bound, for n ≤ 0).
func NewSlots(n int) Slots {
	if n <= 0 {
		return nil
	}
	return make(Slots, n)
}

// try takes a slot if one is free at once.
func (s Slots) try() bool {
	if s == nil {
		return true
	}
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

// take waits for a slot.
func (s Slots) take() {
	if s != nil {
		s <- struct{}{}
	}
}

// free gives a slot back.
func (s Slots) free() {
	if s != nil {
		<-s
	}
}

// Do decides r on key within a batch and returns its answer.
func (c *Coalescer[K, R, T]) Do(ctx context.Context, key K, r R) (T, error) {
	c.mu.Lock()
	q, ok := c.queues[key]
	if !ok {
		q = &queue[R, T]{line: c.newLine()}
		c.queues[key] = q
		if c.cfg.Linger == 0 && c.cfg.Slots.try() {
			// Nothing of this key is pending or under way, and a batch
			// may start: the request is a batch of one, sent at once on
			// the caller's goroutine.
			q.running = 1
			c.mu.Unlock()
			return c.lead(ctx, key, r, q)
		}
	}
	cl := &Call[R, T]{Ctx: ctx, Req: r, done: make(chan struct{}), queued: time.Now()}
	q.waiting = append(q.waiting, cl)
	start := q.running < c.cfg.Flushes
	if start {
		q.running++
	}
	full := q.line.Wait(c.cfg.QueueWait)
	c.mu.Unlock()
	if start {
		c.spawn(key, q)
	}
	var queued <-chan time.Time
	if wait, ok := queueWait(ctx, full); ok {
		t := time.NewTimer(wait)
		defer t.Stop()
		queued = t.C
	}
	for {
		select {
		case <-cl.done:
			return cl.Out, cl.Err
		case <-ctx.Done():
			// The request may still be carried out by a batch already
			// under way (a hold then expires like any unpaid hold).
			var zero T
			return zero, ctx.Err()
		case <-queued:
			queued = nil
			if c.unqueue(key, cl) {
				c.shed.Inc()
				var zero T
				return zero, c.cfg.Busy(key)
			}
			// Its batch has started: wait for it.
		}
	}
}

// waitKey carries when a request's wait for its batch runs out at the
// latest (WaitUntil).
type waitKey struct{}

// WaitUntil returns ctx whose request waits for its batch until t at most,
// if that is sooner than QueueWait: a request that already waited in
// front of the Coalescer (for a slot of its lane, say) spends only what is
// left of one budget here, so that it is answered Busy within one wait,
// not two.
func WaitUntil(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, waitKey{}, t)
}

// queueWait is how long the request of ctx may wait for its batch, at
// most full (0: no bound), and false for no bound.
func queueWait(ctx context.Context, full time.Duration) (time.Duration, bool) {
	wait, bounded := full, full > 0
	if t, ok := ctx.Value(waitKey{}).(time.Time); ok {
		if left := max(time.Until(t), 0); !bounded || left < wait {
			return left, true
		}
	}
	return wait, bounded
}

// lead sends the request that found its key idle as a batch of one, on
// the caller's goroutine and with its context: no hand-off to another
// goroutine and back. Requests that arrive meanwhile queue and start their
// own flushes as usual (q.running counts this one); if some still wait
// when it is done, its place goes to a flushing goroutine, else the key's
// queue goes (even if the request panicked).
func (c *Coalescer[K, R, T]) lead(ctx context.Context, key K, r R, q *queue[R, T]) (T, error) {
	defer func() {
		c.cfg.Slots.free()
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(q.waiting) > 0 {
			c.spawn(key, q)
		} else if q.running--; q.running == 0 {
			c.drop(key, q)
		}
	}()
	c.sizes.Observe(1)
	return c.alone(ctx, key, r)
}

// alone decides r as a batch of its own.
func (c *Coalescer[K, R, T]) alone(ctx context.Context, key K, r R) (T, error) {
	return One(ctx, c.cfg.Many, key, r)
}

// One decides r on key with many as a batch of its own, without a
// Coalescer: a batch's error is then the request's answer.
func One[K comparable, R, T any](ctx context.Context, many func(context.Context, K, []*Call[R, T]) error, key K, r R) (T, error) {
	cl := &Call[R, T]{Ctx: ctx, Req: r}
	if err := many(ctx, key, []*Call[R, T]{cl}); err != nil {
		var zero T
		return zero, err
	}
	return cl.Out, cl.Err
}

// spawn starts a goroutine that flushes q, for a place in q.running
// already counted.
func (c *Coalescer[K, R, T]) spawn(key K, q *queue[R, T]) {
	c.spawned.Add(1)
	go c.run(key, q)
}

// unqueue takes cl out of its key's queue if no batch has taken it yet.
func (c *Coalescer[K, R, T]) unqueue(key K, cl *Call[R, T]) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	q, ok := c.queues[key]
	if !ok {
		return false
	}
	for i, w := range q.waiting {
		if w == cl {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// run flushes the queue's waiting requests until none are left. After a
// batch of several it lingers a moment before the next flush: the callers
// it just answered tend to come back together, and one flush for all of
// them beats a flush for the first alone and another for the rest.
func (c *Coalescer[K, R, T]) run(key K, q *queue[R, T]) {
	if c.cfg.Linger > 0 {
		time.Sleep(c.cfg.Linger)
	}
	last := 0
	for {
		if last > 1 && c.cfg.Regroup > 0 {
			c.awaitGroup(q, last, time.Now().Add(c.cfg.Regroup))
		}
		c.cfg.Slots.take()
		c.mu.Lock()
		if len(q.waiting) > 0 {
			q.line.Waited(time.Since(q.waiting[0].queued))
		}
		var batch []*Call[R, T]
		for len(q.waiting) > 0 && len(batch) < c.cfg.MaxBatch {
			cl := q.waiting[0]
			q.waiting = q.waiting[1:]
			if cl.Ctx.Err() != nil {
				cl.Err = cl.Ctx.Err()
				close(cl.done)
				continue
			}
			batch = append(batch, cl)
		}
		if len(batch) == 0 {
			if q.running--; q.running == 0 {
				c.drop(key, q)
			}
			c.mu.Unlock()
			c.cfg.Slots.free()
			return
		}
		c.mu.Unlock()
		c.flush(key, batch)
		c.cfg.Slots.free()
		last = len(batch)
	}
}

// newLine returns the watch of a new key's queue (nil without a Target):
// a key gone idle is forgotten, and its next queue starts not standing.
func (c *Coalescer[K, R, T]) newLine() *codel.Queue {
	if c.standing == nil {
		return nil
	}
	return codel.New(c.cfg.Target, c.cfg.QueueWait, func(standing bool) {
		if standing {
			c.standing.Inc()
		} else {
			c.standing.Dec()
		}
	})
}

// drop forgets the queue of a key gone idle, under c.mu. The queue has
// drained, a wait of none: that ends its standing, and its count in the
// gauge, through the line's own change callback.
func (c *Coalescer[K, R, T]) drop(key K, q *queue[R, T]) {
	q.line.Waited(0)
	delete(c.queues, key)
}

// awaitGroup waits until the queue holds as many requests as the last
// batch (or MaxBatch), or until the deadline: the regrouping pause.
func (c *Coalescer[K, R, T]) awaitGroup(q *queue[R, T], want int, deadline time.Time) {
	want = min(want, c.cfg.MaxBatch)
	for {
		c.mu.Lock()
		n := len(q.waiting)
		c.mu.Unlock()
		if n >= want || !time.Now().Before(deadline) {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (c *Coalescer[K, R, T]) flush(key K, batch []*Call[R, T]) {
	defer func() {
		for _, cl := range batch {
			close(cl.done)
		}
	}()
	c.sizes.Observe(float64(len(batch)))
	// The batch outlives any one caller's cancellation but keeps the values
	// of the first request's context (such as its connection-wait budget).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].Ctx), 30*time.Second)
	defer cancel()
	err := c.cfg.Many(ctx, key, batch)
	if err != nil && (len(batch) == 1 || shared(err)) {
		// Alone, or an error every request of the batch would meet alone:
		// trying each again would multiply the load on a database that is
		// stuck or away, and a batch that may have committed before its
		// connection was lost must not be tried again here (its requests'
		// retries find what it made).
		for _, cl := range batch {
			cl.Err = err
		}
		return
	}
	if err != nil {
		// Something no single request explains: give each its own batch so
		// that one cannot fail the others.
		c.fallback.Inc()
		c.cfg.Log.Warn("coalesced batch failed; retrying one by one", "what", c.cfg.What, "key", key, "batch", len(batch), "err", err)
		for _, cl := range batch {
			cl.Out, cl.Err = c.alone(cl.Ctx, key, cl.Req)
		}
	}
}

// shared reports whether err, a whole batch's, is one each of its requests
// would meet alone: a deadline (no connection within the shed budget, or a
// stuck database), or the database refusing or losing the connection
// (pg.Away). Other errors of a batch of several are no single request's
// doing, so each request is tried again in a batch of its own.
func shared(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || pg.Away(err)
}

// Overloaded is a Config.Busy for holds on a key that names a thing (such
// as "flight"): 503 overloaded, to try again in a second.
func Overloaded[K any](thing string) func(K) error {
	return func(key K) error {
		e := fault.New(fault.Overloaded, "too many holds on %s %v at once; try again shortly", thing, key)
		e.RetryAfter = time.Second
		return e
	}
}

// Spawned is how many flushing goroutines were started: a request that
// found its key idle is sent on its caller's goroutine instead.
func (c *Coalescer[K, R, T]) Spawned() int64 { return c.spawned.Load() }

// Keys is how many keys have a queue (requests waiting or under way).
func (c *Coalescer[K, R, T]) Keys() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queues)
}

// Waiting is how many requests of key wait for a batch.
func (c *Coalescer[K, R, T]) Waiting(key K) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q, ok := c.queues[key]; ok {
		return len(q.waiting)
	}
	return 0
}
