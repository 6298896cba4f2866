// Package guard holds the layers in front of the database that decide who
// may ask it sooner, or who is turned away early: gates, limits, lanes and
// the waiting room. None of them decides what is sold; PostgreSQL does.
package guard

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"berth.dev/berth/internal/base"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/coalesce"
	"berth.dev/berth/internal/fault"
)

// Config tunes the layers. Zero durations and sizes take the defaults.
type Config struct {
	// On switches every layer (BERTH_PROTECT). Off, Guard lets everything
	// through untouched, so the bare design can be measured beside it.
	On bool
	// RequestLimit (BERTH_REQUEST_LIMIT); the zero Rate turns it off. The
	// hold limit (BERTH_HOLD_LIMIT) is decided by the database with each
	// hold (booking.HoldLimit), not here.
	RequestLimit Rate
	// AddressLimit is the per-address limit counted before authentication
	// (BERTH_ADDRESS_LIMIT).
	AddressLimit Rate
	// ShedWait is the longest wait for a lane slot or a database
	// connection before 503 overloaded (BERTH_SHED_WAIT).
	ShedWait time.Duration
	// Lanes are the concurrency limits per route class; zero lanes are
	// not limited. Derive them from the pool with LanesFor.
	Lanes map[Lane]int
	// Deadlines bound a whole request of a lane (holds and reads): one
	// stuck behind a lock gives up and answers 503 instead of waiting on.
	Deadlines map[Lane]time.Duration
	// SeatGateTTL is how long a seat's gate key keeps other requests out
	// (15 s), never longer than HoldTTL.
	SeatGateTTL time.Duration
	// HoldTTL is how long a flight hold lasts (BERTH_FLIGHT_HOLD_TTL). A
	// gate key is set before its hold and lives at most this long, so it
	// is gone by the time the hold expires: a seat that the database has
	// free again (the hold expired, swept or not, and the seat may be
	// reclaimed) is never turned away by the gate. Zero: no bound.
	HoldTTL time.Duration
	// SoldOutTTL is how long a sold-out answer is believed without asking
	// the database (1 s).
	SoldOutTTL time.Duration
	// TicketTTL and TokenTTL are the lifetimes of a waiting-room ticket (a
	// place in the queue) and of an admission token (1 h and 2 min).
	TicketTTL, TokenTTL time.Duration
	// Secret is BERTH_AUTH_SECRET, from which the waiting room's signing
	// key is derived.
	Secret []byte
	// QuietHolds is how many holds the process may have in flight, the
	// new one included, for a hold to skip the seat gate (default 4;
	// negative: none skips it). So few cannot crowd the database, which
	// decides them anyway, and the everyday hold then costs no Redis round
	// trip; a crowd (a sale) passes the gate.
	QuietHolds int
	// HoldConns is how many database connections holds may have at once
	// (HoldConnsFor); zero: no bound.
	HoldConns int
	// Tracer is the acquire tracer already set on the database pools
	// (created here when nil).
	Tracer *AcquireTracer
}

// LanesFor returns lane limits for a pool of maxConns connections: reads
// may use at most half of them, so searches cannot starve holds; holds may
// queue a few per connection (a batch serves many); the rest share the pool.
func LanesFor(maxConns int) map[Lane]int {
	return map[Lane]int{
		LaneHold:  max(16, 4*maxConns),
		LaneRead:  max(1, maxConns/2),
		LaneOther: max(4, maxConns),
		LaneMoney: max(4, maxConns),
	}
}

// HoldConnsFor is how many of a pool of maxConns connections holds may
// have at once: all but a quarter (at least one), kept for money
// (payment starts, cancellations) and everything else.
func HoldConnsFor(maxConns int) int {
	return max(1, maxConns-max(1, maxConns/4))
}

// Guard is every layer in front of the database.
type Guard struct {
	cfg   Config
	clock clock.Clock
	log   *slog.Logger
	m     *metrics

	// Redis is the shared store; nil when the layers are off.
	Redis *Redis
	// Gate is the seat gate and sold-out hint.
	Gate *Gate
	// Room is the waiting room. Its settings work even when the layers are
	// off (an admin may prepare a sale), but nothing is enforced then.
	Room *Room
	// Requests is the per-client request limit (nil when off).
	Requests *RequestLimiter
	// Addresses is the per-address limit, before authentication (nil
	// when off).
	Addresses *RequestLimiter
	// Tracer bounds the database pool's acquires; set it on the pool.
	Tracer *AcquireTracer

	lanes map[Lane]*lane
	// holding counts the holds in flight in this process (QuietHolds).
	holding atomic.Int64
	// rate is the limits' go-redis/redis_rate limiter (nil when off).
	rate *redis_rate.Limiter
}

// New returns the layers, on b's clock and logger. rdb may be nil when
// cfg.On is false. The metrics are registered on b.Registry.
func New(b base.Archetype, cfg Config, rdb *Redis, pool *pgxpool.Pool) *Guard {
	c, log, reg := b.Clock, b.Log, b.Registry
	if cfg.ShedWait <= 0 {
		// Its default is BERTH_SHED_WAIT's (internal/config), not a second one here.
		panic("guard: Config.ShedWait is required")
	}
	if cfg.SeatGateTTL == 0 {
		cfg.SeatGateTTL = 15 * time.Second
	}
	if cfg.HoldTTL > 0 {
		cfg.SeatGateTTL = min(cfg.SeatGateTTL, cfg.HoldTTL)
	}
	if cfg.QuietHolds == 0 {
		cfg.QuietHolds = 4
	}
	if cfg.SoldOutTTL == 0 {
		cfg.SoldOutTTL = time.Second
	}
	if cfg.TicketTTL == 0 {
		cfg.TicketTTL = time.Hour
	}
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = 2 * time.Minute
	}
	if cfg.Deadlines == nil {
		cfg.Deadlines = map[Lane]time.Duration{LaneHold: 5 * time.Second, LaneRead: 5 * time.Second, LaneMoney: 10 * time.Second}
	}
	g := &Guard{cfg: cfg, clock: c, log: log, m: newMetrics(reg), Redis: rdb, lanes: map[Lane]*lane{}}
	if rdb == nil {
		// Off: the settings store only, on a Redis that is never asked.
		rdb = &Redis{log: log, onError: func(string) {}, onState: func(bool) {}}
	}
	g.Room = newRoom(rdb, pool, c, cfg.Secret, cfg.TicketTTL, cfg.TokenTTL, cfg.On, log, g.m)
	g.Tracer = cfg.Tracer
	if g.Tracer == nil {
		g.Tracer = &AcquireTracer{}
	}
	g.Tracer.OnShed = func() { g.m.turnedAway.WithLabelValues("shed_acquire").Inc() }
	if !cfg.On {
		return g
	}
	rdb.Observe(func(op string) { g.m.redisErrors.WithLabelValues(op).Inc() }, func(up bool) {
		if up {
			g.m.redisUp.Set(1)
		} else {
			g.m.redisUp.Set(0)
		}
	})
	if cfg.HoldConns > 0 {
		g.Tracer.ShareHolds(cfg.HoldConns)
	}
	rl := redis_rate.NewLimiter(rdb.Cmd)
	g.rate = rl
	g.Gate = newGate(rdb, c, cfg.SeatGateTTL, cfg.SoldOutTTL, cfg.ShedWait, g.m)
	g.Requests = newRequestLimiter(rdb, rl, cfg.RequestLimit, g.m)
	g.Addresses = newRequestLimiter(rdb, rl, cfg.AddressLimit, g.m)
	for name, n := range cfg.Lanes {
		if n <= 0 || name == LaneNone {
			continue
		}
		inflight := g.m.inflight.WithLabelValues(string(name))
		shed := g.m.turnedAway.WithLabelValues("shed_" + string(name))
		// Money waits in line for as long as its deadline allows, however
		// many wait: payment starts come only after successful holds, and
		// turning one away at a burst's peak costs a sale. Its waiters are
		// bounded by the deadline and by the open connections
		// (LimitListener), not by a count; other lanes shed past one
		// waiter per slot.
		maxWait := int64(n)
		if name == LaneMoney {
			maxWait = math.MaxInt64
		}
		g.lanes[name] = &lane{name: name, slots: make(chan struct{}, n), maxWait: maxWait,
			inflight: inflight.Add, shed: shed.Inc}
	}
	return g
}

// On reports whether the layers are on.
func (g *Guard) On() bool { return g != nil && g.cfg.On }

// AdmitAddress turns a request from addr away with 429 rate_limited when
// the address exceeds its limit. It runs before authentication, so that a
// flood of requests without a valid token is limited too. Off, or for the
// lane of probes and webhooks, it lets everything in.
func (g *Guard) AdmitAddress(ctx context.Context, ln Lane, addr string) error {
	if !g.On() || ln == LaneNone || addr == "" {
		return nil
	}
	return g.Addresses.Allow(ctx, "addr:"+addr)
}

// Admit lets a request of lane from client in, or turns it away: 429
// rate_limited when the client ("" for none) exceeds its request limit, 503 overloaded
// when the lane stays full for ShedWait. It returns the context the request
// runs with (its database acquires bounded by ShedWait, and the lane's
// deadline) and the function that lets it out. Off, it lets everything in.
func (g *Guard) Admit(ctx context.Context, ln Lane, client string) (context.Context, func(), error) {
	if !g.On() || ln == LaneNone {
		return ctx, func() {}, nil
	}
	if client != "" {
		if err := g.Requests.Allow(ctx, client); err != nil {
			return ctx, nil, err
		}
	}
	leave := func() {}
	// A hold takes its lane's slot in Hold, after the cheap layers:
	// a flood that the gate or the hint turns away must not queue for it.
	// Money waits its turn for a slot and a connection, up to its deadline:
	// it is never shed by a burst of anything else.
	wait := g.cfg.ShedWait
	if ln == LaneMoney {
		wait = g.cfg.Deadlines[LaneMoney]
	}
	switch l, ok := g.lanes[ln]; {
	case !ok || ln == LaneHold:
	case ln == LaneRead:
		// A read takes its slot only when it asks the pool for a
		// connection: one answered from a cache never waits for one.
		ctx, leave = withLaneTicket(ctx, l, wait)
	default:
		var err error
		if leave, err = l.enter(ctx, wait); err != nil {
			return ctx, nil, err
		}
	}
	switch ln {
	case LaneMoney:
	case LaneHold:
		ctx = WithHoldShare(WithAcquireBudget(ctx, g.cfg.ShedWait))
	default:
		ctx = WithAcquireBudget(ctx, g.cfg.ShedWait)
	}
	if d := g.cfg.Deadlines[ln]; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		inner := leave
		leave = func() { cancel(); inner() }
	}
	return ctx, leave, nil
}

// Intent describes a hold about to be asked of the database. A hold of
// another kind (a car) leaves the flight fields zero: only the hold lane
// applies to it.
type Intent struct {
	Customer  int64
	FlightID  int64
	FareClass string
	Seats     []string // validated and sorted; nil for a quantity hold
	Units     int      // seats or quantity
	// Token is the Waiting-Room-Token header ("" when none).
	Token string
}

// errHoldPanicked is the answer a hold that panicked gives the layers.
var errHoldPanicked = errors.New("the hold panicked")

// Hold asks the database for the hold in (the function hold) through the
// layers, the way pgx.BeginFunc wraps a transaction: the layers in front
// of it first (beforeHold), then hold with the context the request runs
// with, then the layers learn how it went: a success spends the
// admission; a refusal, an error or a panic gives back the seat keys and
// the admission. It returns hold's error, a deadline berth set itself
// turned into 503 overloaded (AsOverload), or the layers' own refusal, in
// which case hold never ran. Off, it only runs hold.
//
// The per-customer hold limit is not a layer here: the database decides
// it in the hold's own transaction (booking.HoldLimit), and its 429 comes
// back as hold's error.
func (g *Guard) Hold(ctx context.Context, in Intent, hold func(context.Context) error) error {
	ctx, p, err := g.beforeHold(ctx, in)
	if err != nil {
		return err
	}
	finished := false
	defer func() {
		if !finished { // hold panicked: give back what beforeHold took, and panic on
			p.done(ctx, errHoldPanicked)
		}
	}()
	err = AsOverload(ctx, hold(ctx))
	finished = true
	p.done(ctx, err)
	return err
}

// holdPass is a hold let through the layers; done must be called with the
// database's answer.
type holdPass struct {
	g       *Guard
	h       Intent
	gate    *gatePass
	adm     *admission
	leave   func() // the hold lane's slot
	counted bool   // counted in g.holding
}

// beforeHold runs the layers in front of a hold, cheapest first, and
// returns the pass to finish with done, or the error to answer:
//
//   - the waiting room: 429 waiting_room with ticket and position when the
//     flight's room is on and the request has no valid admission token;
//   - the sold-out hint: 409 sold_out when the class was just found full;
//   - the seat gate: 409 seat_unavailable when another request is holding
//     one of the seats right now (all the seats' keys are taken at once or
//     none); skipped while the process has at most Config.QuietHolds
//     holds in flight;
//   - the admission token is then claimed (spent once);
//   - last, a slot of the hold lane: 503 overloaded when none frees within
//     ShedWait. A car hold (no FlightID) passes the other layers by, and
//     takes its slot when it first asks for a connection, with the
//     context returned.
//
// Off, it returns an empty pass at once.
func (g *Guard) beforeHold(ctx context.Context, h Intent) (context.Context, *holdPass, error) {
	p := &holdPass{g: g, h: h}
	if !g.On() {
		return ctx, p, nil
	}
	if h.FlightID == 0 {
		// A car hold takes its slot only when it first asks the pool for
		// a connection: it may first wait for its car's next batch
		// (rental puts one car's holds together), holding nothing, and a
		// crowd racing for one car must not fill the lane that every
		// other car's holds need.
		if l, ok := g.lanes[LaneHold]; ok {
			ctx, p.leave = withLaneTicket(ctx, l, g.cfg.ShedWait)
		}
		return ctx, p, nil
	}
	// What the hold waits for before the database (another hold of its
	// seats at the gate, a lane slot, its batch) counts from here.
	start := time.Now()
	// The token is checked (signature, customer, flight, expiry) without
	// Redis; claiming it waits until the cheaper layers have passed.
	per, err := g.Room.admitRate(ctx, h.FlightID)
	if err != nil {
		return ctx, nil, err
	}
	var tok *pass
	if per > 0 {
		t, err := g.Room.verify(h.Token, 'a', g.clock.Now())
		if err != nil || t.flight != h.FlightID || t.customer != h.Customer {
			if h.Token != "" {
				g.m.turnedAway.WithLabelValues("waiting_room_bad_token").Inc()
			}
			if err := g.Room.queue(ctx, h.FlightID, h.Customer, per, g.clock.Now()); err != nil {
				return ctx, nil, err
			}
		} else {
			tok = &t
		}
	}
	// What this process already knows the gate refuses is refused first,
	// costing Redis nothing; then the gate itself, unless the process is
	// quiet.
	if err := g.Gate.inProcess(h.FlightID, h.FareClass, h.Seats, h.Units); err != nil {
		return ctx, nil, err
	}
	p.counted = true
	if g.holding.Add(1) > int64(g.cfg.QuietHolds) {
		if p.gate, err = g.Gate.enter(ctx, h.FlightID, h.FareClass, h.Seats, h.Units); err != nil {
			p.undo(ctx)
			return ctx, nil, err
		}
	}
	if tok != nil {
		if p.adm, err = g.Room.claim(ctx, *tok); err != nil {
			p.undo(ctx)
			// A used admission buys no second hold: back to the queue.
			if err := g.Room.queue(ctx, h.FlightID, h.Customer, per, g.clock.Now()); err != nil {
				return ctx, nil, err
			}
			return ctx, nil, fault.New(fault.WaitingRoom, "this admission was already used; queue again for another hold")
		}
	}
	ctx, err = p.enterLane(ctx, start)
	if err != nil {
		p.undo(ctx)
		return ctx, nil, err
	}
	return ctx, p, nil
}

// enterLane takes a slot of the hold lane, waiting at most what is left of
// ShedWait since start (the seat gate may have waited for another hold of
// the same seats). The context returned carries what is left of that wait
// to the hold's coalescing queue (coalesce.WaitUntil): a shed hold waits
// ShedWait in all before the database, not at the gate, then for a slot,
// then as long again for its batch.
func (p *holdPass) enterLane(ctx context.Context, start time.Time) (context.Context, error) {
	l, ok := p.g.lanes[LaneHold]
	if !ok {
		return ctx, nil
	}
	leave, err := l.enter(ctx, max(0, p.g.cfg.ShedWait-time.Since(start)))
	if err != nil {
		return ctx, err
	}
	p.leave = leave
	return coalesce.WaitUntil(ctx, start.Add(p.g.cfg.ShedWait)), nil
}

// undo gives back what beforeHold took when the hold is not asked after all.
func (p *holdPass) undo(ctx context.Context) {
	p.uncount()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	p.g.Gate.release(ctx, p.gate)
	p.g.Room.done(ctx, p.adm, false)
}

// uncount takes the hold out of the process's holds in flight, once.
func (p *holdPass) uncount() {
	if p.counted {
		p.counted = false
		p.g.holding.Add(-1)
	}
}

// done finishes a hold with the database's answer (nil when it was held):
// a success spends the admission; a refusal gives back the seat keys and
// the admission, and a sold_out is remembered as the class's hint.
func (p *holdPass) done(ctx context.Context, holdErr error) {
	g := p.g
	if !g.On() {
		return
	}
	if p.leave != nil {
		p.leave()
	}
	p.uncount()
	if fault.Is(holdErr, fault.RateLimited) {
		g.m.turnedAway.WithLabelValues("hold_limit").Inc()
	}
	// The answer is already decided: finish even if the client has gone.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if holdErr == nil {
		g.Gate.held(ctx, p.gate)
		g.Room.done(ctx, p.adm, true)
		return
	}
	g.Gate.release(ctx, p.gate)
	g.Room.done(ctx, p.adm, false)
	var fe *fault.Error
	if errors.As(holdErr, &fe) && fe.Code == fault.SoldOut && p.h.FlightID != 0 {
		g.Gate.soldOutSeen(ctx, p.h.FlightID, p.h.FareClass, p.h.Units, fe.FreeAt)
	}
}

// Released tells the layers that a flight booking's seats came back (it was
// cancelled), so that neither its seat keys nor a sold-out hint turn the
// next buyer away.
func (g *Guard) Released(ctx context.Context, flightID int64, class string, seats []string) {
	if !g.On() {
		return
	}
	g.Gate.Forget(ctx, flightID, class, seats)
}

// Ready checks Redis for /readyz.
func (g *Guard) Ready(ctx context.Context) error {
	return g.Redis.Ping(ctx)
}

// scripts are the layers' own Lua scripts, loaded into Redis by Warm.
var scripts = []*redis.Script{gateEnter, gateHeld, gateRelease, hintSet, roomTicket, roomFront, roomSpent}

// Warm readies the layers before the first request: the waiting rooms'
// settings are loaded, and the layers' scripts are in Redis's script cache,
// so that the first burst of a sale runs each by its hash (EVALSHA) at once
// instead of every request of the moment being told NOSCRIPT and sending
// the script again. Off, it does nothing.
func (g *Guard) Warm(ctx context.Context) error {
	if !g.On() {
		return nil
	}
	for _, s := range scripts {
		if !g.Redis.Usable() {
			break // Redis is away: the layers step aside until it answers
		}
		if err := s.Load(ctx, g.Redis.Client).Err(); err != nil {
			g.Redis.Fail("script load", err)
		}
	}
	g.warmLimits(ctx)
	return g.Room.Warm(ctx)
}

// warmLimits puts the scripts of the hold and request limits in Redis's
// cache too. They are go-redis/redis_rate's, which does not export them:
// each is run once for nothing (no event, on a key of its own), which
// writes nothing and leaves the script cached. Without it every hold of
// the first burst would be told NOSCRIPT and send the script again, a
// second round trip in sequence.
func (g *Guard) warmLimits(ctx context.Context) {
	if g.rate == nil || !g.Redis.Usable() {
		return
	}
	key, lim := g.Redis.key("warm"), redis_rate.PerSecond(1)
	if _, err := g.rate.AllowN(ctx, key, lim, 0); err != nil {
		g.Redis.Fail("script load", err)
		return
	}
	if _, err := g.rate.AllowAtMost(ctx, key, lim, 0); err != nil {
		g.Redis.Fail("script load", err)
	}
}
