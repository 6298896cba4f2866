package flight

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
)

// coalescer turns concurrent holds on the same flight into one statement
// per batch, like a group commit: the first hold of a flight is flushed at
// once (on its caller's goroutine, see lead), holds that arrive while it
// runs wait and go together in the next, up to maxBatch. One round trip
// and one commit then serve many holds, and the hot rows are locked once
// per batch instead of once per hold. Up to flushes batches of a flight run at once: one is sent while
// another's commit is written. Each hold is still all or nothing, and
// PostgreSQL decides (holdBatch); across processes, batches queue on the
// same row locks as single holds would.
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
	shed      prometheus.Counter

	// spawned counts the flushing goroutines started.
	spawned atomic.Int64

	mu     sync.Mutex
	queues map[int64]*flightQueue
}

// flightQueue is one flight's holds waiting for a batch.
type flightQueue struct {
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
		queues: map[int64]*flightQueue{},
		sizes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "berth_hold_batch_size",
			Help:    "Holds per coalesced batch (one statement).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}),
		fallback: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_hold_batch_fallbacks_total",
			Help: "Coalesced batches that failed as a whole and were retried one hold at a time.",
		}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_hold_batch_shed_total",
			Help: "Holds answered 503 because their batch did not start within the queue wait.",
		}),
	}
	if reg != nil {
		reg.MustRegister(c.sizes, c.fallback, c.shed)
	}
	return c
}

func (c *coalescer) hold(ctx context.Context, r HoldRequest) (*booking.Booking, error) {
	c.mu.Lock()
	q, ok := c.queues[r.FlightID]
	if !ok {
		q = &flightQueue{}
		c.queues[r.FlightID] = q
		if c.linger == 0 {
			// Nothing of this flight is pending or under way: the hold
			// is a batch of one, flushed at once on the caller's goroutine.
			q.running = 1
			c.mu.Unlock()
			return c.lead(ctx, r, q)
		}
	}
	cl := &call{ctx: ctx, req: r, done: make(chan struct{})}
	q.waiting = append(q.waiting, cl)
	start := q.running < c.flushes
	if start {
		q.running++
	}
	c.mu.Unlock()
	if start {
		c.spawn(r.FlightID, q)
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

// lead flushes the hold that found its flight idle as a batch of one, on
// the caller's goroutine and with its context, as a hold without
// coalescing would: no hand-off to another goroutine and back. Holds that
// arrive meanwhile queue and start their own flushes as usual (q.running
// counts this one); if some still wait when it is done, its place goes to
// a flushing goroutine, else the flight's queue goes (even if the hold
// panicked).
func (c *coalescer) lead(ctx context.Context, r HoldRequest, q *flightQueue) (*booking.Booking, error) {
	defer func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(q.waiting) > 0 {
			c.spawn(r.FlightID, q)
		} else if q.running--; q.running == 0 {
			delete(c.queues, r.FlightID)
		}
	}()
	c.sizes.Observe(1)
	return c.svc.holdAlone(ctx, r)
}

// spawn starts a goroutine that flushes q, for a place in q.running
// already counted.
func (c *coalescer) spawn(flightID int64, q *flightQueue) {
	c.spawned.Add(1)
	go c.run(flightID, q)
}

// unqueue takes cl out of its flight's queue if no batch has taken it yet.
func (c *coalescer) unqueue(flightID int64, cl *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	q, ok := c.queues[flightID]
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

// run flushes the queue's waiting holds until none are left. After a batch
// of several holds it lingers a moment before the next flush: the callers
// it just answered tend to come back together, and one flush for all of
// them beats a flush for the first alone and another for the rest. A queue
// that was idle flushes its first hold at once.
func (c *coalescer) run(flightID int64, q *flightQueue) {
	if c.linger > 0 {
		time.Sleep(c.linger)
	}
	last := 0
	for {
		if last > 1 && c.regroup > 0 {
			c.awaitGroup(q, last, time.Now().Add(c.regroup))
		}
		c.mu.Lock()
		var batch []*call
		for len(q.waiting) > 0 && len(batch) < c.maxBatch {
			cl := q.waiting[0]
			q.waiting = q.waiting[1:]
			if cl.ctx.Err() != nil {
				cl.err = cl.ctx.Err()
				close(cl.done)
				continue
			}
			batch = append(batch, cl)
		}
		if len(batch) == 0 {
			if q.running--; q.running == 0 {
				delete(c.queues, flightID)
			}
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.flush(flightID, batch)
		last = len(batch)
	}
}

// awaitGroup waits until the queue holds as many holds as the last batch
// (or maxBatch), or until the deadline: the regrouping pause after a batch.
func (c *coalescer) awaitGroup(q *flightQueue, want int, deadline time.Time) {
	want = min(want, c.maxBatch)
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

func (c *coalescer) flush(flightID int64, batch []*call) {
	defer func() {
		for _, cl := range batch {
			close(cl.done)
		}
	}()
	c.sizes.Observe(float64(len(batch)))
	// The batch outlives any one caller's cancellation but keeps the values
	// of the first request's context (such as its connection-wait budget).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), 30*time.Second)
	defer cancel()
	results, err := c.svc.holdMany(ctx, flightID, batch)
	if err != nil && (len(batch) == 1 || errors.Is(err, context.DeadlineExceeded)) {
		// Alone, or no connection within the shed budget (or the database
		// is stuck): every hold of the batch would wait the same way alone.
		for _, cl := range batch {
			cl.err = err
		}
		return
	}
	if err != nil {
		// Something no single request explains: give each its own
		// statement so that one cannot fail the others.
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
