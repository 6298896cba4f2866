// Package app wires berth's parts into a running service: the database
// pool, the domain services, the HTTP API and the background workers. The
// binary's serve command and the end-to-end tests both start berth through
// it, so they run the same thing.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"berth.dev/berth/internal/audit"
	"berth.dev/berth/internal/base"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/coalesce"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/events"
	"berth.dev/berth/internal/flight"
	"berth.dev/berth/internal/guard"
	"berth.dev/berth/internal/httpapi"
	"berth.dev/berth/internal/idempotency"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paysim"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/rental"
)

// Options are what New needs beyond the settings. Zero values take the real
// clock, a discarding logger and a fresh registry.
type Options struct {
	Clock    clock.Clock
	Log      *slog.Logger
	Registry *prometheus.Registry
	// SeatMapTTL overrides the seat-map cache lifetime (tests set it to a
	// nanosecond to see every change at once).
	SeatMapTTL time.Duration
	// Consumers are extra event consumers (tests); EventSettings adjusts
	// the event machinery's settings (tests).
	Consumers     []events.Consumer
	EventSettings func(*events.Settings)
	// Gateway replaces the payment gateway (tests' hand-written fakes).
	Gateway payment.Gateway
	// RedisPrefix starts every Redis key (tests sharing one Redis give
	// each test its own).
	RedisPrefix string
	// Dev serves the development sign-in page /dev/login (`berth dev`
	// only: it signs anyone in as anyone).
	Dev bool
	// PoolTracer, when set, also traces the pool's statements (benchmarks
	// count round trips with it).
	PoolTracer pgx.QueryTracer
	// QuietHolds overrides guard.Config.QuietHolds (tests of the seat
	// gate set it negative, so that every hold passes the gate).
	QuietHolds int
}

// App is a wired berth service.
type App struct {
	Config  config.Config
	Clock   clock.Clock
	Log     *slog.Logger
	Pool    *pgxpool.Pool
	Flights *flight.Service
	Life    *booking.Lifecycle
	Sweeper *booking.Sweeper
	Events  *events.Worker
	// RunSweeper runs the sweeper in Run (the default); tests that sweep by
	// calling Sweeper.Pass themselves turn it off.
	RunSweeper bool
	API        *httpapi.Server
	// Keys stores idempotency keys; its janitor runs in Run.
	Keys     *idempotency.Store
	Registry *prometheus.Registry

	// Payments takes and refunds money; Refunds is its consumer of
	// refund.requested events. PaySim is the built-in gateway simulator,
	// set when no gateway URL is configured.
	Payments *payment.Service
	Refunds  *payment.Refunds
	PaySim   *paysim.Sim
	// Replica serves searches and seat maps when BERTH_DATABASE_READ_URL
	// is set and it is current (else nil); Guard is the surge layers.
	Replica *pg.Replica
	Guard   *guard.Guard
	// Warmer warms the primary pool's connections; Run retries, every
	// second, the ones it could not warm yet.
	Warmer *pg.Warmer
}

// New connects to the database (migrating it first when cfg.Migrate is set)
// and wires the service. When a step fails, New closes what it had opened
// (the pools and Redis) before it returns the error.
func New(ctx context.Context, cfg config.Config, o Options) (_ *App, err error) {
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
		o.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if o.SeatMapTTL == 0 {
		o.SeatMapTTL = 2 * time.Second
	}
	// Part of the pool is kept open (BERTH_DB_MIN_CONNS): a sale's first
	// second must not wait for connections to be made (their time would
	// count against the shed wait and turn holds away).
	pc := pg.PoolConfig{MaxConns: int32(cfg.DBMaxConns), MinConns: int32(min(cfg.DBMinConns, cfg.DBMaxConns)), AppName: "berth"}
	tracer := &guard.AcquireTracer{}
	var tracers []pgx.QueryTracer
	if cfg.Protect {
		tracers = append(tracers, tracer)
	}
	// With the relays in this process, its own commits of events wake them
	// directly instead of through a NOTIFY that every listening session
	// would need a transaction to read.
	waker := &outbox.CommitWaker{}
	if cfg.Events.InServe {
		tracers = append(tracers, waker)
		pc.Params = map[string]string{outbox.WakeLocalParam: "on"}
	}
	if o.PoolTracer != nil {
		tracers = append(tracers, o.PoolTracer)
	}
	tracers = append(tracers, pg.NewRoundTrips(o.Registry))
	switch len(tracers) {
	case 0:
	case 1:
		pc.Tracer = tracers[0]
	default:
		pc.Tracer = multitracer.New(tracers...)
	}
	// Every connection of the primary pool runs the hold paths once, rolled
	// back, and a car search's calendar load before it serves (pg.Warmer):
	// a backend's first hold costs 20× its next, its first load several
	// times. A connection is warm once it ran the search and a hold of
	// either kind: a database that sells only seats, or only cars, warms
	// what it has. Not the replica's: it cannot write.
	primary := pc
	primary.Warm = pg.NewWarmer(func(ctx context.Context, c *pgx.Conn) bool {
		now := o.Clock.Now()
		seat := flight.Warm(ctx, c, now)
		car := rental.WarmHold(ctx, c, now)
		searched := rental.WarmSearch(ctx, c, now)
		return (seat || car) && searched
	})
	pool, err := pg.Open(ctx, cfg.DatabaseURL, primary)
	if err != nil {
		return nil, err
	}
	a := &App{Config: cfg, Clock: o.Clock, Log: o.Log, Pool: pool, Registry: o.Registry, RunSweeper: true, Warmer: primary.Warm}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	arch := a.arch()
	if cfg.Migrate {
		applied, err := pg.Migrate(ctx, pool)
		if err != nil {
			return nil, err
		}
		o.Log.Info("migrated", "applied", applied)
		// The connections were warmed before the schema was there.
		a.Warmer.Pass(ctx, pool)
	}
	ahead, err := pg.CheckSchema(ctx, pool)
	if err != nil {
		return nil, err
	}
	if ahead > 0 {
		o.Log.Warn("the database's schema is newer than this berth's: right while a rolling upgrade replaces this process, an old binary otherwise",
			"versions_ahead", ahead, "binary_version", pg.Target())
	}
	ready, err := a.surge(ctx, pc, tracer, o)
	if err != nil {
		return nil, err
	}
	// The hold limit is one of the surge layers (off with them), decided
	// by the database in each hold's transaction.
	var holdLimit booking.HoldLimit
	if cfg.Protect {
		holdLimit = booking.HoldLimit{N: cfg.HoldLimit.N, Window: cfg.HoldLimit.Window}
	}
	// Coalesced batches of flights and cars take a slot each, one per
	// connection holds may use.
	var slots coalesce.Slots
	if cfg.Protect {
		slots = coalesce.NewSlots(holdConns(cfg))
	}
	a.Flights = flight.NewService(pool, o.Clock, flight.Config{
		HoldTTL: cfg.FlightHoldTTL, HoldLimit: holdLimit, OfferTTL: cfg.WaitlistOfferTTL, SeatMapTTL: o.SeatMapTTL, SearchTTL: 3 * time.Second,
		Buckets: cfg.FareBuckets, Coalesce: cfg.Protect, MaxBatch: cfg.HoldBatch, Flushes: cfg.HoldFlushes, QueueWait: cfg.ShedWait, Slots: slots,
		Log: o.Log, Registry: o.Registry, Reads: a.reads(),
	})
	a.Life = booking.NewLifecycle(o.Clock, map[booking.Kind]booking.Inventory{
		booking.KindFlight: a.Flights.Inventory(),
		booking.KindCar:    rental.Inventory{},
	})
	a.Flights.SetExpirer(a.Life)
	a.Life.PickupEarly = cfg.PickupEarly
	a.Life.RefundOnly = cfg.Events.RefundData == "refund"
	a.Life.OnReleased = a.bookingReleased(o.Registry)
	cars := rental.NewService(pool, o.Clock, a.Life, rental.Config{HoldTTL: cfg.CarHoldTTL, HoldLimit: holdLimit, Queue: cfg.Protect,
		Slots: slots, Log: o.Log, Registry: o.Registry})
	// The sweeper looks at least once per the shortest hold time, so a hold
	// made while it waits is not swept a whole interval after it ran out.
	sweepEvery := min(cfg.SweepInterval, cfg.FlightHoldTTL, cfg.CarHoldTTL, cfg.WaitlistOfferTTL)
	a.Sweeper = booking.NewSweeper(arch, a.Life, pool, sweepEvery)
	if err := a.wirePayments(cfg, o); err != nil {
		return nil, err
	}
	if err := a.wireEvents(o); err != nil {
		return nil, err
	}
	waker.Set(a.Events.Wake)
	for name, check := range a.eventChecks() {
		ready[name] = check
	}
	a.Keys = idempotency.New(arch, pool)
	a.API = httpapi.New(httpapi.Deps{
		Log: o.Log, Clock: o.Clock, Pool: pool, Flights: a.Flights, Cars: cars, Lifecycle: a.Life, Keys: a.Keys,
		HoldExtension: cfg.HoldExtension, AuthSecret: []byte(cfg.AuthSecret), Registry: o.Registry, Guard: a.Guard, Ready: ready,
		Payments: a.Payments, PaySim: a.paySimHandler(),
		Consumers: a.Events.Consumers(), Dev: o.Dev, TrustedProxies: cfg.TrustedProxies,
		Audit: audit.Options{SweepInterval: cfg.SweepInterval, EventRetention: cfg.Events.Retention},
	})
	return a, nil
}

// surge opens what the surge layers need (Redis, the read-only pool) and
// returns the extra readiness checks.
func (a *App) surge(ctx context.Context, pc pg.PoolConfig, tracer *guard.AcquireTracer, o Options) (map[string]func(context.Context) error, error) {
	cfg := a.Config
	ready := map[string]func(context.Context) error{}
	if cfg.DatabaseReadURL != "" {
		// The replica is optional: berth starts, and reads from the primary,
		// while it is down or behind; /readyz says so without failing.
		rp, err := pg.NewReplica(ctx, a.Pool, cfg.DatabaseReadURL, pc, pg.ReplicaConfig{MaxLag: cfg.ReadMaxLag, Log: o.Log})
		if err != nil {
			return nil, err
		}
		a.Replica = rp
		rp.Tick(ctx)
		ready["databaseRead"] = func(ctx context.Context) error {
			if err := rp.Check(ctx); err != nil {
				return fmt.Errorf("%w: %w", httpapi.ErrDegraded, err)
			}
			return nil
		}
	}
	var rdb *guard.Redis
	if cfg.Protect {
		var err error
		if rdb, err = guard.OpenRedis(ctx, cfg.RedisURL, guard.RedisOptions{Prefix: o.RedisPrefix, AutoPipeline: cfg.RedisURL != ""}, o.Log); err != nil {
			return nil, err
		}
		// berth serves without Redis (the layers step aside): an outage
		// must not take every process out of the load balancer.
		ready["redis"] = degraded(rdb.Ping)
	}
	a.Guard = guard.New(a.arch(), guard.Config{
		On: cfg.Protect, RequestLimit: guardRate(cfg.RequestLimit), AddressLimit: guardRate(cfg.AddressLimit), ShedWait: cfg.ShedWait,
		Lanes: guard.LanesFor(cfg.DBMaxConns), Secret: []byte(cfg.AuthSecret), Tracer: tracer,
		HoldTTL: cfg.FlightHoldTTL, HoldConns: holdConns(cfg), QuietHolds: o.QuietHolds,
	}, rdb, a.Pool)
	if err := a.Guard.Warm(ctx); err != nil {
		o.Log.Warn("surge layers not warmed up yet", "err", err)
	}
	return ready, nil
}

// arch is the shared base every service is built on: the app's logger,
// clock and registry.
func (a *App) arch() base.Archetype {
	return base.Archetype{Log: a.Log, Clock: a.Clock, Registry: a.Registry}
}

// guardRate maps a configured rate to the surge layers' own.
func guardRate(r config.Rate) guard.Rate { return guard.Rate{N: r.N, Window: r.Window} }

// degraded marks the failures of check as a dependency berth serves
// without (httpapi.ErrDegraded): /readyz then stays 200.
func degraded(check func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := check(ctx); err != nil {
			return fmt.Errorf("%w: %w", httpapi.ErrDegraded, err)
		}
		return nil
	}
}

// reads is where searches and seat maps read: the replica while it is
// current, else the primary (nil: always the primary).
func (a *App) reads() func() *pgxpool.Pool {
	if a.Replica == nil {
		return nil
	}
	return a.Replica.Reads
}

// runAudit starts the periodic audit when BERTH_AUDIT_INTERVAL is set.
func (a *App) runAudit(ctx context.Context, wg *sync.WaitGroup) {
	if a.Config.AuditInterval <= 0 {
		return
	}
	p := audit.NewPeriodic(a.Pool, a.Clock.Now, audit.Options{
		SweepInterval: a.Config.SweepInterval, EventRetention: a.Config.Events.Retention,
	}, a.Config.AuditInterval, a.Log, a.Registry)
	wg.Go(func() { p.Run(ctx) })
}

// Close releases the database pools and Redis.
func (a *App) Close() {
	a.Pool.Close()
	if a.Replica != nil {
		a.Replica.Close()
	}
	if a.Guard != nil && a.Guard.Redis != nil {
		_ = a.Guard.Redis.Close()
	}
}

// maxOpenConns bounds the connections served at once (with BERTH_PROTECT):
// each costs a goroutine and buffers, so a flood of clients cannot exhaust
// memory; the rest wait in the kernel's backlog. maxConnsPerAddr bounds
// those of one client address (the trusted proxies' excepted), so that one
// client's idle keep-alive connections cannot take them all: a thousand
// leaves room for a large office or a carrier's NAT. Neither the trusted
// proxies nor loopback have that bound.
const (
	maxOpenConns    = 10_000
	maxConnsPerAddr = 1_000
)

// Run serves HTTP on ln and runs the background workers until ctx ends,
// then stops accepting requests, lets in-flight ones finish (up to 20 s)
// and stops the workers.
func (a *App) Run(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           a.API,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    32 << 10,
		ErrorLog:          slog.NewLogLogger(a.Log.Handler(), slog.LevelWarn),
	}
	workers, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	if a.RunSweeper {
		wg.Go(func() { a.Sweeper.Run(workers) })
	}
	if a.Config.Events.InServe {
		wg.Go(func() { a.Events.Run(workers) })
		if a.Refunds != nil {
			wg.Go(func() { a.Refunds.Run(workers, time.Second) })
		}
	}
	if a.Config.Protect {
		wg.Go(func() { a.Guard.Room.Run(workers) })
		wg.Go(func() { a.Guard.Gate.Listen(workers) })
	}
	wg.Go(func() { a.Warmer.Run(workers, a.Pool, time.Second) })
	a.runAudit(workers, &wg)
	if a.Replica != nil {
		wg.Go(func() { a.Replica.Run(workers) })
	}
	a.runPayments(workers, &wg, ln.Addr())

	if a.Config.Protect {
		// The trusted proxies and loopback (a sidecar proxy, a load test
		// on the host) are not one client each.
		exempt := append(slices.Clone(a.Config.TrustedProxies), netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))
		ln = guard.LimitListener(ln, maxOpenConns, maxConnsPerAddr, exempt)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	a.Log.Info("listening", "addr", ln.Addr().String())

	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		a.Log.Info("shutting down")
		shutCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = srv.Shutdown(shutCtx)
		cancel()
	}
	stopWorkers()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	a.Log.Info("stopped")
	return nil
}

// holdConns is how many database connections holds may use at once:
// BERTH_HOLD_CONNS, at most guard.HoldConnsFor the pool.
func holdConns(cfg config.Config) int {
	n := guard.HoldConnsFor(cfg.DBMaxConns)
	if cfg.HoldConns > 0 {
		n = min(n, cfg.HoldConns)
	}
	return n
}
