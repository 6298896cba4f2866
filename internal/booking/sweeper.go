package booking

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/pg"
)

// Sweeper expires overdue holds of every kind, releasing what they held.
// Several may run at once, in one process or many: each booking is expired
// by exactly one of them.
type Sweeper struct {
	Lifecycle *Lifecycle
	DB        pg.Beginner
	Log       *slog.Logger
	Interval  time.Duration
	// MaxPerPass and PassTimeout bound one pass; what is left waits for the
	// next.
	MaxPerPass  int
	PassTimeout time.Duration

	runs    prometheus.Counter
	expired prometheus.Counter
	failed  prometheus.Counter
}

// NewSweeper returns a sweeper that registers its metrics with reg.
func NewSweeper(l *Lifecycle, db pg.Beginner, log *slog.Logger, interval time.Duration, reg prometheus.Registerer) *Sweeper {
	s := &Sweeper{
		Lifecycle: l, DB: db, Log: log, Interval: interval, MaxPerPass: 5000, PassTimeout: 20 * time.Second,
		runs:    prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_sweeper_runs_total", Help: "Hold-expiry sweeper passes."}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_sweeper_expired_total", Help: "Holds expired by the sweeper."}),
		failed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_sweeper_errors_total", Help: "Sweeper passes that ended with an error."}),
	}
	reg.MustRegister(s.runs, s.expired, s.failed)
	return s
}

// Run sweeps every Interval until ctx ends.
func (s *Sweeper) Run(ctx context.Context) {
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		if _, err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.Log.Error("sweep holds", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
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
