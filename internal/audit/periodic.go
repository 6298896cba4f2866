package audit

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Periodic runs the audit every Interval inside serve and worker, records
// it in audit_run (what the admin page shows) and exports the violation
// counts as berth_audit_violations, so an alert fires when an invariant
// breaks in production rather than when someone runs `berth audit`.
//
// Several processes may run it: a pass that finds a recorded audit younger
// than Interval does not audit again but exports that one, so every
// process reports the same numbers and the database does one audit per
// interval (two at most when processes race, which costs only a query).
type Periodic struct {
	pool     *pgxpool.Pool
	now      func() time.Time
	opts     Options
	interval time.Duration
	log      *slog.Logger

	violations *prometheus.GaugeVec
	lastRun    prometheus.Gauge
	errors     prometheus.Counter
}

// NewPeriodic returns the periodic audit; o.Now is set on every pass.
func NewPeriodic(pool *pgxpool.Pool, now func() time.Time, o Options, interval time.Duration, log *slog.Logger, reg prometheus.Registerer) *Periodic {
	p := &Periodic{
		pool: pool, now: now, opts: o, interval: interval, log: log,
		violations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "berth_audit_violations",
			Help: "Violations the last audit found, per invariant (I1…I8); 0 when it holds.",
		}, []string{"invariant"}),
		lastRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berth_audit_last_run_timestamp_seconds",
			Help: "When the audit whose results berth_audit_violations shows ran (Unix time; 0 before the first).",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_audit_errors_total",
			Help: "Periodic audit passes that could not run or record the audit.",
		}),
	}
	for _, c := range checks {
		p.violations.WithLabelValues(c.id)
	}
	reg.MustRegister(p.violations, p.lastRun, p.errors)
	return p
}

// Run audits every interval until ctx ends; a failed pass is logged and
// counted, and the next one tries again.
func (p *Periodic) Run(ctx context.Context) {
	t := time.NewTicker(min(p.interval, time.Minute))
	defer t.Stop()
	for {
		pass, cancel := context.WithTimeout(ctx, max(p.interval/2, 30*time.Second))
		if _, err := p.Pass(pass); err != nil && ctx.Err() == nil {
			p.errors.Inc()
			p.log.Error("periodic audit", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass audits unless an audit was recorded less than an interval ago, then
// exports the newest audit's results. It reports whether it audited.
func (p *Periodic) Pass(ctx context.Context) (bool, error) {
	now := p.now()
	last, ok, err := Last(ctx, p.pool)
	if err != nil {
		return false, err
	}
	if ok && now.Sub(last.At) < p.interval {
		p.export(last.At, last.Results)
		return false, nil
	}
	o := p.opts
	o.Now = now
	results, err := Run(ctx, p.pool, o)
	if err != nil {
		return false, err
	}
	if err := Record(ctx, p.pool, now, results); err != nil {
		return false, err
	}
	if Failed(results) {
		p.log.Error("audit found violations", "report", Format(results))
	}
	p.export(now, results)
	return true, nil
}

func (p *Periodic) export(at time.Time, results []Result) {
	for _, r := range results {
		p.violations.WithLabelValues(r.ID).Set(float64(r.Count))
	}
	p.lastRun.Set(float64(at.UnixNano()) / 1e9)
}
