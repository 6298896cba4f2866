package guard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
)

// Load shedding: when the database is slow or the pool is busy, a request
// is answered 503 overloaded with Retry-After after a short wait instead of
// queueing without end. Three bounds do it:
//
//   - every route class (lane) has a concurrency limit, with a short wait
//     for a slot and a bounded number of waiters, so searches cannot take
//     the connections holds need, and no flood grows goroutines without end
//     (a public read takes its slot only when it first needs a database
//     connection: one answered from a cache never waits for one);
//   - a request may wait only ShedWait for a database connection: the pool's
//     acquire tracer puts that deadline on the acquire alone (AcquireTracer);
//   - holds and reads carry an overall deadline, so one stuck on a lock
//     gives up (its transaction rolls back) and answers 503.

// Lane is a class of routes that shares one concurrency limit.
type Lane string

// The lanes.
const (
	LaneHold  Lane = "hold"  // POST /bookings: the hot write path
	LaneRead  Lane = "read"  // public reads: search, flight, seat map, cars
	LaneOther Lane = "other" // everything else that uses the database
	// LaneMoney is payment starts and cancellations: money first. Its
	// requests have their own slots, wait in line for a slot and for a
	// connection up to their deadline (however many wait) rather than
	// being shed after ShedWait, and holds can never take the connections
	// kept for them (AcquireTracer.ShareHolds).
	LaneMoney Lane = "money"
	// LaneRoom is the waiting room's polls: limited per client, but
	// without a concurrency slot, since they only ask Redis.
	LaneRoom Lane = "room"
	LaneNone Lane = "" // probes, metrics and the gateway's webhook: never limited
)

// RetryAfterOverloaded is the Retry-After of a shed request.
const RetryAfterOverloaded = time.Second

// Overloaded returns the error of a shed request.
func Overloaded(format string, args ...any) *fault.Error {
	e := fault.New(fault.Overloaded, format, args...)
	e.RetryAfter = RetryAfterOverloaded
	return e
}

// AsOverload turns err into a 503 overloaded when it is a deadline that
// berth set itself (a shed acquire, or a request's overall deadline) rather
// than the client going away, or when PostgreSQL could not be given a
// connection (too many clients, starting up or shutting down, unreachable):
// the database is busy or away, so the client gets Retry-After, never 500.
// Other errors are returned as they are.
func AsOverload(ctx context.Context, err error) error {
	if err == nil || fault.CodeOf(err) != "" {
		return err
	}
	if pg.Refused(err) {
		return overloadedBy(err, "the database cannot take the request now; try again shortly")
	}
	if pg.Lost(err) {
		return overloadedBy(err, "the connection to the database was lost; try again shortly")
	}
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.Canceled) {
		return err
	}
	return overloadedBy(err, "the database is busy; try again shortly")
}

// overloadedBy is Overloaded with detail, caused by err.
func overloadedBy(err error, detail string) *fault.Error {
	e := Overloaded("%s", detail)
	e.Err = err
	return e
}

// lane is a counting semaphore with a bounded wait.
type lane struct {
	name     Lane
	slots    chan struct{}
	waiting  atomic.Int64
	maxWait  int64
	inflight func(delta float64)
	shed     func()
}

// enter takes a slot, waiting at most wait; it returns fault.Overloaded when
// none frees in time or too many already wait.
func (l *lane) enter(ctx context.Context, wait time.Duration) (func(), error) {
	select {
	case l.slots <- struct{}{}:
		return l.leave(), nil
	default:
	}
	if l.waiting.Add(1) > l.maxWait {
		l.waiting.Add(-1)
		l.shed()
		return nil, Overloaded("too many %s requests at once; try again shortly", l.name)
	}
	defer l.waiting.Add(-1)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return l.leave(), nil
	case <-t.C:
		l.shed()
		return nil, Overloaded("too many %s requests at once; try again shortly", l.name)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *lane) leave() func() {
	l.inflight(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			<-l.slots
			l.inflight(-1)
		})
	}
}

// laneTicket is a request's claim on a slot of its lane that is taken only
// when the request first asks the pool for a connection (AcquireTracer),
// and given back when the request ends. A public read answered from a
// cache, or a static asset, never takes one: the lane bounds the reads
// that use the database, so a burst of cache misses waiting on a slow
// database cannot turn away the reads the process can answer from memory.
type laneTicket struct {
	l    *lane
	wait time.Duration

	mu    sync.Mutex
	leave func() // the slot, once taken
	ended bool
}

// ticketKey carries a request's *laneTicket.
type ticketKey struct{}

// withLaneTicket returns ctx whose first connection acquire takes a slot
// of l (waiting at most wait), and the function that ends the request:
// it gives the slot back, if one was taken. A detached load that started
// the request's acquire after it ended (a cache fill serving others)
// proceeds without a slot.
func withLaneTicket(ctx context.Context, l *lane, wait time.Duration) (context.Context, func()) {
	t := &laneTicket{l: l, wait: wait}
	return context.WithValue(ctx, ticketKey{}, t), t.end
}

// take takes the ticket's slot unless it has one or its request ended.
func (t *laneTicket) take(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leave != nil || t.ended {
		return nil
	}
	leave, err := t.l.enter(ctx, t.wait)
	if err != nil {
		return err
	}
	t.leave = leave
	return nil
}

func (t *laneTicket) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended = true
	if t.leave != nil {
		t.leave()
	}
}

// budgetKey marks a context whose connection acquires are bounded.
type budgetKey struct{}

// cancelKey carries the cancel function of an acquire's deadline from
// TraceAcquireStart to TraceAcquireEnd.
type cancelKey struct{}

// errShed is the cause of an acquire deadline set by AcquireTracer.
var errShed = errors.New("no database connection within the shed budget")

// errLaneFull is the cause of an acquire cut because its request found no
// slot of its lane (a laneTicket): the lane counted it as shed already.
var errLaneFull = errors.New("no slot of the request's lane within the shed wait")

// WithAcquireBudget returns ctx marked so that every database connection
// acquired with it (from a pool traced by AcquireTracer) waits at most d.
// Background work that may wait longer simply does not carry the mark.
func WithAcquireBudget(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, budgetKey{}, d)
}

// AcquireTracer bounds the connection acquires of contexts marked by
// WithAcquireBudget, and counts the ones that ran out of time. Set it as
// the pool's tracer (pg.PoolConfig.Tracer). It traces nothing else.
//
// The budget d is measured against progress: an acquire gives up once the
// pool has handed out no connection for d (the database is stalled or
// saturated: every connection is busy and none comes back), and in any case
// after maxBudgets × d. A pool that is busy but moving (connections come
// back every few milliseconds, as when a hundred customers race for one car)
// keeps its waiters, who are served in order, instead of answering a plain
// race 503. A hold's wait for a slot of the holds' share (ShareHolds) is
// bounded the same way, by the share's own progress (holds giving their
// connections back), and the hard bound covers both waits together.
type AcquireTracer struct {
	// OnShed, when set, is called for each acquire that ran out of time.
	OnShed func()

	// progress is when the last acquire completed (Unix nanoseconds).
	progress atomic.Int64
	// holds is the share of the pool that holds may use at once (nil: the
	// whole pool); held are the connections holds have from it.
	holds atomic.Pointer[chan struct{}]
	held  sync.Map // *pgx.Conn → struct{}
	// returned is when a hold last gave a connection back to the holds'
	// share (Unix nanoseconds): the share's progress.
	returned atomic.Int64
}

// ShareHolds lets the acquires of holds (contexts marked by WithHoldShare)
// have at most n of the pool's connections at once, so that a burst of
// holds always leaves the rest to money and everything else. Call it
// before the pool serves requests.
func (t *AcquireTracer) ShareHolds(n int) {
	ch := make(chan struct{}, n)
	t.holds.Store(&ch)
}

// holdShareKey marks a context whose acquires count against the holds'
// share of the pool.
type holdShareKey struct{}

// shareTakenKey records, from TraceAcquireStart to TraceAcquireEnd, that an
// acquire took a slot of the holds' share.
type shareTakenKey struct{}

// WithHoldShare marks ctx as a hold's: its connections come from the
// holds' share of the pool (see ShareHolds).
func WithHoldShare(ctx context.Context) context.Context {
	return context.WithValue(ctx, holdShareKey{}, true)
}

// takeShare waits for a slot of the holds' share until no hold has given
// a connection back for d, and never past hard; false when it gave up (or
// ctx ended). Waiters are served in order: while holds keep coming back,
// the queue moves and each waits its turn, however long the queue, up to
// hard.
func (t *AcquireTracer) takeShare(ctx context.Context, slots chan struct{}, d time.Duration, hard time.Time) bool {
	select {
	case slots <- struct{}{}:
		return true
	default:
	}
	timer := time.NewTimer(min(d, time.Until(hard)))
	defer timer.Stop()
	for {
		select {
		case slots <- struct{}{}:
			return true
		case <-timer.C:
			wait := time.Until(giveUpAt(&t.returned, d, hard))
			if wait <= 0 {
				return false
			}
			timer.Reset(wait)
		case <-ctx.Done():
			return false
		}
	}
}

// giveUpAt is when a waiter measured by progress (Unix nanoseconds of the
// last step) gives up: d after that step, but never past hard.
func giveUpAt(progress *atomic.Int64, d time.Duration, hard time.Time) time.Time {
	next := time.Unix(0, progress.Load()).Add(d)
	if next.After(hard) {
		return hard
	}
	return next
}

// maxBudgets bounds a wait on a pool (or the holds' share) still moving: at
// most this many budgets in all.
const maxBudgets = 4

// TraceAcquireStart puts the budget's deadline on the acquire.
func (t *AcquireTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	start := time.Now()
	if tk, ok := ctx.Value(ticketKey{}).(*laneTicket); ok && tk.take(ctx) != nil {
		// The request's lane is full: the acquire fails at once, as a
		// shed one.
		return shedAcquire(ctx, errLaneFull)
	}
	d, ok := ctx.Value(budgetKey{}).(time.Duration)
	if slots := t.holds.Load(); slots != nil && ctx.Value(holdShareKey{}) != nil {
		wait, hard := d, start.Add(maxBudgets*d)
		if !ok {
			wait, hard = time.Minute, start.Add(time.Minute)
		}
		if !t.takeShare(ctx, *slots, wait, hard) {
			// No connection of the holds' share came back in time: the
			// acquire fails at once, as a shed one.
			return shedAcquire(ctx, errShed)
		}
		ctx = context.WithValue(ctx, shareTakenKey{}, *slots)
	}
	if !ok {
		return ctx
	}
	actx, cancel := context.WithCancelCause(ctx)
	hard := start.Add(maxBudgets * d)
	var (
		mu      sync.Mutex
		timer   *time.Timer
		stopped bool
	)
	check := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		// The pool moved within the budget: wait on, until a budget after
		// that progress, never past the hard bound.
		wait := time.Until(giveUpAt(&t.progress, d, hard))
		if wait <= 0 {
			stopped = true
			cancel(errShed)
			return
		}
		timer.Reset(wait)
	}
	mu.Lock()
	timer = time.AfterFunc(min(d, time.Until(hard)), check)
	mu.Unlock()
	stop := func() {
		mu.Lock()
		stopped = true
		timer.Stop()
		mu.Unlock()
		cancel(nil)
	}
	return context.WithValue(shedContext{actx}, cancelKey{}, context.CancelFunc(stop))
}

// shedAcquire returns ctx already cut by AcquireTracer, for cause (errShed
// or errLaneFull): the acquire made with it fails at once, as one that ran
// out of its budget.
func shedAcquire(ctx context.Context, cause error) context.Context {
	actx, cancel := context.WithCancelCause(ctx)
	cancel(cause)
	return context.WithValue(shedContext{actx}, cancelKey{}, context.CancelFunc(func() {}))
}

// shedContext reports an acquire cut by AcquireTracer as a deadline
// exceeded (the cause is errShed or errLaneFull), as a timeout would: a
// deadline that berth set itself, answered 503 (AsOverload), never
// mistaken for a client gone.
type shedContext struct{ context.Context }

func (c shedContext) Err() error {
	err := c.Context.Err()
	if cause := context.Cause(c.Context); err != nil && (errors.Is(cause, errShed) || errors.Is(cause, errLaneFull)) {
		return context.DeadlineExceeded
	}
	return err
}

// TraceAcquireEnd releases the deadline, notes the pool's progress and
// counts a shed acquire.
func (t *AcquireTracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, data pgxpool.TraceAcquireEndData) {
	if data.Err == nil {
		t.progress.Store(time.Now().UnixNano())
	}
	if slots, ok := ctx.Value(shareTakenKey{}).(chan struct{}); ok {
		if data.Err == nil {
			t.held.Store(data.Conn, slots)
		} else {
			<-slots
		}
	}
	cancel, ok := ctx.Value(cancelKey{}).(context.CancelFunc)
	if !ok {
		return
	}
	if data.Err != nil && errors.Is(context.Cause(ctx), errShed) && t.OnShed != nil {
		t.OnShed()
	}
	cancel()
}

// TraceRelease gives a hold's connection back to the holds' share.
func (t *AcquireTracer) TraceRelease(_ *pgxpool.Pool, data pgxpool.TraceReleaseData) {
	if slots, ok := t.held.LoadAndDelete(data.Conn); ok {
		t.returned.Store(time.Now().UnixNano())
		<-slots.(chan struct{})
	}
}

// TraceQueryStart does nothing: the tracer is only about acquires.
func (*AcquireTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd does nothing.
func (*AcquireTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Acquire takes a connection from pool, waiting at most budget, and returns
// fault.Overloaded (503, Retry-After) when none frees in time. A batch that
// serves many requests acquires its connection this way and runs its
// transaction on it (pg.InTx accepts a *pgxpool.Conn); the caller releases it.
func Acquire(ctx context.Context, pool *pgxpool.Pool, budget time.Duration) (*pgxpool.Conn, error) {
	actx, cancel := context.WithTimeoutCause(ctx, budget, errShed)
	defer cancel()
	conn, err := pool.Acquire(actx)
	if err != nil {
		if ctx.Err() == nil && errors.Is(context.Cause(actx), errShed) {
			return nil, overloadedBy(err, "no database connection free; try again shortly")
		}
		return nil, err
	}
	return conn, nil
}

// ClientNet is the key of a client address in the address limits: the
// address itself for IPv4, and its /64 for IPv6, since an IPv6 client is
// normally given a whole /64 and could otherwise take a new address for
// every connection or request.
func ClientNet(a netip.Addr) string {
	if p := clientNet(a); p.Addr().Is6() {
		return p.String()
	}
	return a.WithZone("").Unmap().String()
}

// clientNet is ClientNet as a prefix: a /32 for IPv4, a /64 for IPv6.
func clientNet(a netip.Addr) netip.Prefix {
	a = a.WithZone("").Unmap()
	if a.Is6() {
		return netip.PrefixFrom(a, 64).Masked()
	}
	return netip.PrefixFrom(a, 32)
}

// LimitListener returns ln accepting at most n connections at once: the
// rest wait in the kernel's backlog. Every open connection costs a goroutine
// and buffers, so this bounds them however many clients connect. With
// perAddr > 0, one client (ClientNet: an address, an IPv6 one's /64) may
// hold at most perAddr of them: a connection beyond is closed as soon as
// it is accepted, so that one client's idle connections cannot take every
// place. Addresses in exempt (the trusted proxies, through which every
// client connects) have no such bound.
func LimitListener(ln net.Listener, n, perAddr int, exempt []netip.Prefix) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{}),
		perAddr: perAddr, exempt: exempt, open: map[netip.Prefix]int{}}
}

type limitListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	perAddr int
	exempt  []netip.Prefix
	mu      sync.Mutex
	open    map[netip.Prefix]int // connections open by client, for those bounded
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		leave, ok := l.enter(c.RemoteAddr())
		if !ok {
			_ = c.Close()
			<-l.slots
			continue
		}
		return &limitConn{Conn: c, release: func() { leave(); <-l.slots }}, nil
	}
}

// enter counts a connection from ra against its client, and returns what
// gives the place back; false when the client has perAddr open already.
func (l *limitListener) enter(ra net.Addr) (leave func(), ok bool) {
	var ip net.IP
	if tcp, ok := ra.(*net.TCPAddr); ok {
		ip = tcp.IP
	}
	addr, isIP := netip.AddrFromSlice(ip)
	if l.perAddr <= 0 || !isIP || l.exempted(addr.Unmap()) {
		return func() {}, true
	}
	client := clientNet(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[client] >= l.perAddr {
		return nil, false
	}
	l.open[client]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.open[client]--; l.open[client] <= 0 {
			delete(l.open, client)
		}
	}, true
}

// exempted reports whether a is in one of the exempt prefixes.
func (l *limitListener) exempted(a netip.Addr) bool {
	for _, p := range l.exempt {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
