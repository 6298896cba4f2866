package flight

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
)

// coalescer turns concurrent holds on the same flight into one transaction
// per batch, like a group commit: the first hold of a flight starts a
// flush at once, holds that arrive while it runs wait and go together in
// the next, up to maxBatch. One commit then serves many holds, and the hot
// rows are locked once per batch instead of once per hold. Up to flushes
// batches of a flight run at once: each locks the counter row only with
// its last statement, so one does its reads and writes while another
// waits for its commit. Each hold is still all or nothing, and PostgreSQL
// still decides (holdBatch); across processes, batches queue on the same
// row locks as single holds would.
type coalescer struct {
	svc      *Service
	maxBatch int
	flushes  int
	linger   time.Duration
	// regroup is the longest pause after a batch of several holds to let
	// their callers' next holds gather for the next flush.
	regroup time.Duration
	// queueWait is the longest a hold waits for its batch to start, like a
	// request waiting for a database connection: past it, the hold is
	// answered 503 overloaded instead of queueing without end.
	queueWait time.Duration
	sizes     prometheus.Histogram
	fallback  prometheus.Counter
	retried   prometheus.Counter
	shed      prometheus.Counter

	mu    sync.Mutex
	lanes map[int64]*lane
}

type lane struct {
	waiting []*call
	running int // flushing goroutines
}

type call struct {
	ctx  context.Context
	req  HoldRequest
	done chan struct{}
	b    *booking.Booking
	err  error
}

func newCoalescer(svc *Service, maxBatch, flushes int, linger, queueWait time.Duration, reg prometheus.Registerer) *coalescer {
	c := &coalescer{svc: svc, maxBatch: maxBatch, flushes: flushes, linger: linger, regroup: 2 * time.Millisecond, queueWait: queueWait,
		lanes: map[int64]*lane{},
		sizes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "berth_hold_batch_size",
			Help:    "Holds per coalesced transaction.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}),
		fallback: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_hold_batch_fallbacks_total",
			Help: "Coalesced transactions that failed as a whole and were retried one hold at a time.",
		}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_hold_batch_retries_total",
			Help: "Coalesced transactions tried again with the fare counters locked because another took the room they counted on.",
		}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_hold_batch_shed_total",
			Help: "Holds answered 503 because their batch did not start within the queue wait.",
		}),
	}
	if reg != nil {
		reg.MustRegister(c.sizes, c.fallback, c.retried, c.shed)
	}
	return c
}

func (c *coalescer) hold(ctx context.Context, r HoldRequest) (*booking.Booking, error) {
	cl := &call{ctx: ctx, req: r, done: make(chan struct{})}
	c.mu.Lock()
	l, ok := c.lanes[r.FlightID]
	if !ok {
		l = &lane{}
		c.lanes[r.FlightID] = l
	}
	l.waiting = append(l.waiting, cl)
	start := l.running < c.flushes
	if start {
		l.running++
	}
	c.mu.Unlock()
	if start {
		go c.run(r.FlightID, l)
	}
	var queued <-chan time.Time
	if c.queueWait > 0 {
		t := time.NewTimer(c.queueWait)
		defer t.Stop()
		queued = t.C
	}
	for {
		select {
		case <-cl.done:
			return cl.b, cl.err
		case <-ctx.Done():
			// The hold may still be made by a batch already under way; it
			// then expires like any unpaid hold.
			return nil, ctx.Err()
		case <-queued:
			queued = nil
			if c.unqueue(r.FlightID, cl) {
				c.shed.Inc()
				e := fault.New(fault.Overloaded, "too many holds on flight %d at once; try again shortly", r.FlightID)
				e.RetryAfter = time.Second
				return nil, e
			}
			// Its batch has started: wait for it.
		}
	}
}

// unqueue takes cl out of its lane if no batch has taken it yet.
func (c *coalescer) unqueue(flightID int64, cl *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.lanes[flightID]
	if !ok {
		return false
	}
	for i, w := range l.waiting {
		if w == cl {
			l.waiting = append(l.waiting[:i], l.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// run flushes the lane's waiting holds until none are left. After a batch
// of several holds it lingers a moment before the next flush: the callers
// it just answered tend to come back together, and one flush for all of
// them beats a flush for the first alone and another for the rest. A lane
// that was idle flushes its first hold at once.
func (c *coalescer) run(flightID int64, l *lane) {
	if c.linger > 0 {
		time.Sleep(c.linger)
	}
	last := 0
	for {
		if last > 1 && c.regroup > 0 {
			c.awaitGroup(l, last, time.Now().Add(c.regroup))
		}
		c.mu.Lock()
		var batch []*call
		for len(l.waiting) > 0 && len(batch) < c.maxBatch {
			cl := l.waiting[0]
			l.waiting = l.waiting[1:]
			if cl.ctx.Err() != nil {
				cl.err = cl.ctx.Err()
				close(cl.done)
				continue
			}
			batch = append(batch, cl)
		}
		if len(batch) == 0 {
			if l.running--; l.running == 0 {
				delete(c.lanes, flightID)
			}
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.flush(flightID, batch)
		last = len(batch)
	}
}

// awaitGroup waits until the lane holds as many holds as the last batch
// (or maxBatch), or until the deadline: the regrouping pause after a batch.
func (c *coalescer) awaitGroup(l *lane, want int, deadline time.Time) {
	want = min(want, c.maxBatch)
	for {
		c.mu.Lock()
		n := len(l.waiting)
		c.mu.Unlock()
		if n >= want || !time.Now().Before(deadline) {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (c *coalescer) flush(flightID int64, batch []*call) {
	defer func() {
		for _, cl := range batch {
			close(cl.done)
		}
	}()
	c.sizes.Observe(float64(len(batch)))
	if len(batch) == 1 {
		cl := batch[0]
		cl.b, cl.err = c.svc.holdAlone(cl.ctx, cl.req)
		return
	}
	reqs := make([]HoldRequest, len(batch))
	for i, cl := range batch {
		reqs[i] = cl.req
	}
	// The batch outlives any one caller's cancellation but keeps the values
	// of the first request's context (such as its connection-wait budget).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), 30*time.Second)
	defer cancel()
	var results []result
	try := func(lockQuota bool) error {
		return pg.InTx(ctx, c.svc.pool, func(tx pgx.Tx) error {
			var err error
			results, err = holdBatch(ctx, tx, flightID, reqs, c.svc.clock.Now(), c.svc.holdTTL, lockQuota)
			if err != nil {
				return err
			}
			// Each request's Idempotency-Key learns, with the batch, what
			// it made; a key lost to a retry fails the batch, which is then
			// held one by one.
			for i, cl := range batch {
				claim, ok := pg.KeyClaimOf(cl.ctx)
				if !ok || results[i].err != nil {
					continue
				}
				if err := pg.RecordEffectOf(ctx, tx, claim, booking.EffectOf(results[i].b.ID)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	err := try(false)
	if errors.Is(err, errQuotaRace) {
		// Another transaction took the room the batch counted on: decide
		// again with the counters locked.
		c.retried.Inc()
		err = try(true)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// No connection within the shed budget (or the database is stuck):
		// every hold of the batch would wait the same way alone.
		for _, cl := range batch {
			cl.err = err
		}
		return
	}
	if err != nil {
		// Something no single request explains: give each its own
		// transaction so that one cannot fail the others.
		c.fallback.Inc()
		c.svc.log.Warn("coalesced hold failed; retrying one by one", "flight", flightID, "holds", len(batch), "err", err)
		for _, cl := range batch {
			cl.b, cl.err = c.svc.holdAlone(cl.ctx, cl.req)
		}
		return
	}
	for i, cl := range batch {
		cl.b, cl.err = results[i].b, results[i].err
	}
}
