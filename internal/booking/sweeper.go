package booking

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/base"
	"berth.dev/berth/internal/pg"
)

// Sweeper expires overdue holds of every kind, releasing what they held.
// Several may run at once, in one process or many: each booking is expired
// by exactly one of them.
type Sweeper struct {
	Lifecycle *Lifecycle
	DB        SweepDB
	Log       *slog.Logger
	// Interval is the longest wait between passes; MinGap the shortest. In
	// between, a pass starts when the earliest hold falls due, so a hold
	// that ran out frees its seats, units or car within about MinGap
	// instead of up to a whole Interval later.
	Interval time.Duration
	MinGap   time.Duration
	// MaxPerPass and PassTimeout bound one pass; what is left waits for the
	// next.
	MaxPerPass  int
	PassTimeout time.Duration

	runs    prometheus.Counter
	expired prometheus.Counter
	failed  prometheus.Counter
}

// SweepDB is what a sweeper works on: a pool.
type SweepDB interface {
	pg.Beginner
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// NewSweeper returns a sweeper of l's holds that logs to b.Log and
// registers its metrics with b.Registry (the clock is l's).
func NewSweeper(b base.Archetype, l *Lifecycle, db SweepDB, interval time.Duration) *Sweeper {
	s := &Sweeper{
		Lifecycle: l, DB: db, Log: b.Log, Interval: interval, MinGap: time.Second, MaxPerPass: 5000, PassTimeout: 20 * time.Second,
		runs:    prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_sweeper_runs_total", Help: "Hold-expiry sweeper passes."}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_sweeper_expired_total", Help: "Holds expired by the sweeper."}),
		failed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_sweeper_errors_total", Help: "Sweeper passes that ended with an error."}),
	}
	b.Registry.MustRegister(s.runs, s.expired, s.failed)
	return s
}

// Run sweeps until ctx ends: when the earliest hold falls due, but at
// least MinGap after the last pass and at most Interval after it.
func (s *Sweeper) Run(ctx context.Context) {
	for {
		if _, err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.Log.Error("sweep holds", "err", err)
		}
		t := time.NewTimer(s.untilNext(ctx))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// untilNext returns the wait before the next pass: until the earliest HELD
// hold falls due, within [MinGap, Interval]. A hold made during the wait
// with a shorter time than the wait is swept at the end of the wait.
func (s *Sweeper) untilNext(ctx context.Context) time.Duration {
	var due *time.Time
	err := s.DB.QueryRow(ctx, `SELECT min(hold_expires_at) FROM booking WHERE status = 'HELD'`).Scan(&due)
	if err != nil {
		if ctx.Err() == nil {
			s.Log.Warn("read the next hold's expiry", "err", err)
		}
		return s.Interval
	}
	if due == nil {
		return s.Interval
	}
	return min(max(due.Sub(s.Lifecycle.Clock.Now()), s.MinGap), s.Interval)
}

// Pass expires due holds until none is left, MaxPerPass were expired or
// PassTimeout passed, and returns how many it expired.
func (s *Sweeper) Pass(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.PassTimeout)
	defer cancel()
	s.runs.Inc()
	n := 0
	for n < s.MaxPerPass {
		found, err := s.Lifecycle.ExpireOne(ctx, s.DB)
		if err != nil {
			s.failed.Inc()
			return n, err
		}
		if !found {
			break
		}
		n++
		s.expired.Inc()
	}
	if n > 0 {
		s.Log.Info("expired holds", "count", n)
	}
	return n, nil
}
