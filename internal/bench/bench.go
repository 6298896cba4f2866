package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/audit"
)

// FailedError is a run that finished but failed: an invariant violated, a
// server error, or an audit that could not run. The report is complete.
type FailedError struct{ Failures []string }

func (e *FailedError) Error() string {
	return "bench failed:\n  " + strings.Join(e.Failures, "\n  ")
}

// Run runs the scenario in each mode o asks for, one after the other, and
// returns the report. The error is a *FailedError when the run finished
// but failed (the report says why), ErrUnavailable (wrapped) when this
// build cannot run the scenario, or another error when the bench could not
// set itself up; the report then holds what was measured so far.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	rep := &Report{Scenario: o.Scenario, Started: time.Now().UTC(), Settings: o.settings(), Failures: []string{}}
	rep.Machine = Machine{NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(),
		PostgreSQL: serverVersion(ctx, o.DatabaseURL), Redis: "embedded", LoadStart: loadAverage()}
	defer func() { rep.Machine.LoadEnd = loadAverage() }()
	if o.RedisURL != "" {
		if u, err := url.Parse(o.RedisURL); err == nil {
			rep.Machine.Redis = u.Host
		}
	}
	for _, procs := range o.Processes {
		for _, protect := range o.modes() {
			if ctx.Err() != nil {
				break
			}
			m, err := runMode(ctx, &o, protect, procs)
			if m != nil {
				rep.Modes = append(rep.Modes, m)
				rep.Failures = append(rep.Failures, m.Failures...)
			}
			if err != nil {
				rep.Targets = rep.targets()
				return rep, fmt.Errorf("%s: %w", modeName(protect, procs), err)
			}
		}
	}
	if ctx.Err() != nil {
		rep.Failures = append(rep.Failures, "interrupted before the end")
	}
	rep.Targets = rep.targets()
	if len(rep.Failures) > 0 {
		return rep, &FailedError{Failures: rep.Failures}
	}
	return rep, nil
}

// modeName names a mode: "protect=on", or "protect=on x2" for two
// processes.
func modeName(protect bool, procs int) string {
	if procs == 1 {
		return "protect=" + onOff(protect)
	}
	return fmt.Sprintf("protect=%s x%d", onOff(protect), procs)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func serverVersion(ctx context.Context, u string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return "unknown"
	}
	defer conn.Close(context.Background())
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "unknown"
	}
	return v
}

// runMode prepares a fresh world, runs the scenario and the closed loops
// against procs berth processes with protect on or off, stops them and
// audits the database. Setup errors end the mode at once.
func runMode(ctx context.Context, o *Options, protect bool, procs int) (m *Mode, err error) {
	m = &Mode{Name: modeName(protect, procs), Protect: protect, Processes: procs, Features: map[string]string{}, Failures: []string{}, Notes: []string{}}
	m.Database = fmt.Sprintf("%s%s_%s_%dp_%d_%s", dbPrefix, strings.ReplaceAll(o.Scenario, "-", "_"), onOff(protect), procs, time.Now().Unix(), randomHex(3))
	say := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "%-12s "+format+"\n", append([]any{m.Name}, args...)...)
		}
	}

	say("creating database %s", m.Database)
	dbURL, err := createDatabase(ctx, o.DatabaseURL, m.Database)
	if err != nil {
		return m, err
	}
	if !o.Keep {
		defer func() {
			if derr := dropDatabase(o.DatabaseURL, m.Database); derr != nil {
				m.Notes = append(m.Notes, fmt.Sprintf("could not drop the database %s (drop it by hand): %v", m.Database, derr))
			}
		}()
	} else {
		m.Notes = append(m.Notes, "database kept: "+m.Database)
	}
	cfg, env, err := serverConfig(dbURL, o.RedisURL, protect, o.Getenv)
	if err != nil {
		return m, err
	}
	pool, err := openPool(ctx, dbURL)
	if err != nil {
		return m, err
	}
	defer pool.Close()
	say("starting %d berth process(es)", procs)
	srv, err := startServers(ctx, cfg, env, procs, o.ServeArgv, o.ServerLog)
	if err != nil {
		return m, err
	}
	rss := sampleRSS(srv, 200*time.Millisecond)
	defer func() {
		if m.Memory == nil {
			m.Memory = rss.finish()
		}
		if serr := srv.shutdown(); serr != nil && err == nil {
			err = fmt.Errorf("berth stopped with an error: %w", serr)
		}
	}()
	c := newClient(max(o.Conns, o.RejectClients, o.HotClients, o.HotClientsMore))
	defer c.close()

	// The flight every mode needs: one class of a single unit, held once,
	// so it is sold out; the hold also probes whether payments exist.
	say("loading the %s world", o.Scenario)
	soldOut, err := createFlight(ctx, c, srv, []flightFare{{FareClass: "ECONOMY", Price: 1_500_000, Currency: "VND", Capacity: 1, Seats: []string{}}})
	if err != nil {
		return m, err
	}
	payFeature, payments, err := probePayments(ctx, c, srv, soldOut)
	if err != nil {
		return m, err
	}
	m.Features["payments"] = payFeature

	var (
		streams []stream
		bind    func(*openLoop)
	)
	switch o.Scenario {
	case FlashSale:
		flights, err := setupSale(ctx, o, c, srv, protect, m.Features)
		if err != nil {
			return m, err
		}
		f := &flashSale{o: o, srv: srv, c: c, flights: flights, pop: newPopularity(len(flights), o.Zipf),
			pay: payments && o.PayShare > 0, waitingRoom: strings.HasPrefix(m.Features["waitingRoom"], "on"),
			pollEvery: min(time.Second, o.WaitMax/4), customers: srv.tokenBook(saleCustomers, scheduledCount(o.Rate, o.Duration))}
		if !f.pay && payments {
			m.Features["payments"] = "off (--pay-share 0)"
		}
		streams = []stream{{op: "hold", rate: o.Rate, conns: o.Conns, send: f.hold}}
		bind = func(l *openLoop) { f.loop = l }
	case CarPeak:
		cars, err := setupCars(ctx, o, c, srv)
		if err != nil {
			m.Features["cars"] = "unavailable in this build"
			return m, err
		}
		m.Features["cars"] = fmt.Sprintf("on, %d cars", len(cars))
		p := newCarPeak(o, srv, cars)
		// Each stream has its own clients: slow holds must not make
		// searches wait for a client, nor the other way round.
		streams = []stream{
			{op: "search", rate: o.SearchRate, conns: o.Conns, send: p.search},
			{op: "car-hold", rate: o.CarHoldRate, conns: o.Conns, send: p.hold},
		}
		if o.UncachedSearchRate > 0 {
			streams = append(streams, stream{op: "search-uncached", rate: o.UncachedSearchRate, conns: o.Conns, send: p.uncachedSearch})
		}
		bind = func(l *openLoop) { p.loop = l }
	}
	say("opening %d client connections", o.Conns)
	warmUp(ctx, c, srv, o.Conns)
	// A sale's flights are published before it opens; berth may prepare
	// for them in between (it warms its connections on a free seat).
	sleepUntil(ctx, time.Now().Add(publishedBefore))
	moneyBefore := scrapeMoney(ctx, c, srv)
	scheduled := make([]string, 0, len(streams))
	for _, s := range streams {
		scheduled = append(scheduled, s.op)
	}
	loop := newOpenLoop(c, time.Now().Add(200*time.Millisecond), o.Duration, o.Drain, o.Timeout, 4*o.Conns)
	bind(loop)
	say("running %s for %s", o.Scenario, o.Duration)
	progCtx, stopProgress := context.WithCancel(ctx)
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		loop.report(progCtx, o.Progress, m.Name, streams)
	}()
	loop.run(ctx, streams)
	stopProgress()
	<-reported
	m.Open = openResult(loop.rec, scheduled, o.Duration)
	if n, cut := unanswered(m.Open); n+cut > 0 {
		m.Notes = append(m.Notes, fmt.Sprintf("the client fell behind the offered load: %d scheduled requests were never sent (all %d clients were waiting for earlier answers) "+
			"and %d were still unanswered when the drain time ran out; their latencies count up to then, a lower bound", n, o.Conns, cut))
	}

	if !o.NoClosed && ctx.Err() == nil {
		say("closed loops: hot flight (%d clients), rejections and bare net/http (%d clients), %s each", o.HotClients, o.RejectClients, o.ClosedDuration)
		m.Closed, err = closedLoops(ctx, o, c, srv, pool, protect, soldOut, m.Features)
		if err != nil {
			return m, err
		}
	}

	// Let in-flight work (payments' webhooks) land, stop berth, then audit
	// the database at rest.
	sleepUntil(ctx, time.Now().Add(o.Settle))
	if o.Scenario == FlashSale {
		m.Money = moneyLane(m.Open, moneyBefore, scrapeMoney(ctx, c, srv))
	}
	m.Memory = rss.finish()
	if err := srv.shutdown(); err != nil {
		m.Failures = append(m.Failures, fmt.Sprintf("%s: berth stopped with an error: %v", m.Name, err))
	}
	m.Audit = runAudit(context.WithoutCancel(ctx), o, pool, cfg.SweepInterval)
	if m.Audit.OK {
		say("audit: all invariants hold")
	} else {
		say("audit: FAILED")
	}
	m.Failures = append(m.Failures, m.verdict()...)
	return m, nil
}

// publishedBefore is how long before the sale opens its flights exist.
const publishedBefore = 2 * time.Second

func unanswered(o *OpenResult) (unsent, cut int) {
	for _, op := range o.Ops {
		unsent += op.Count(OutcomeUnsent)
		cut += op.Count(OutcomeCutOff)
	}
	return unsent, cut
}

// runAudit checks the invariants on the mode's database.
func runAudit(ctx context.Context, o *Options, pool *pgxpool.Pool, sweep time.Duration) AuditResult {
	var res AuditResult
	if o.BeforeAudit != nil {
		if err := o.BeforeAudit(ctx, pool); err != nil {
			res.Error = "before audit: " + err.Error()
			return res
		}
	}
	results, err := audit.Run(ctx, pool, audit.Options{Now: time.Now(), SweepInterval: sweep})
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Ran, res.OK, res.Results = true, !audit.Failed(results), results
	return res
}

// warmUp opens the client's connections before the measurement, as a real
// sale's customers have theirs (and their TLS) open when it starts, so
// that the first second does not measure the load generator's dials:
// conns requests at once, three times, each to /healthz. It leaves berth
// itself as it was: warming berth (its database connections, PostgreSQL's
// per-backend caches) is berth's job, and the first second measures it.
func warmUp(ctx context.Context, c *client, srv *server, conns int) {
	for range 3 {
		var wg sync.WaitGroup
		for k := range conns {
			wg.Go(func() {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				c.do(rctx, call{method: http.MethodGet, url: srv.at(int64(k)) + "/healthz"})
			})
		}
		wg.Wait()
	}
}
