package pg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrReplicaBehind is what Replica.Check returns while reads go to the
// primary: the replica is down or lags more than allowed.
var ErrReplicaBehind = errors.New("read replica unavailable or behind; reads go to the primary")

// Replica routes reads that may be a little stale (searches, seat maps) to
// a streaming replica while it answers and lags less than MaxLag, and to
// the primary otherwise. Nothing that decides — a hold, a payment, a
// cancellation — reads through it: those run on the primary, in their
// transaction, so a lagging replica can never make berth refuse or allow
// one.
//
// Lag is measured against the primary, not by the replica's own replay
// timestamp (which grows while the primary is idle and stays put while the
// replica is cut off from it): every check samples the primary's WAL
// position, and the lag is the age of the newest sample the replica has
// replayed.
type Replica struct {
	primary, replica *pgxpool.Pool
	maxLag, every    time.Duration
	log              *slog.Logger

	useReplica atomic.Bool
	mu         sync.Mutex
	samples    []lsnSample // the primary's positions, oldest first
	lag        time.Duration
	lastErr    error
}

type lsnSample struct {
	at  time.Time
	lsn int64
}

// ReplicaConfig tunes a Replica. Zero values: MaxLag 5 s, checks every
// second.
type ReplicaConfig struct {
	MaxLag time.Duration
	Every  time.Duration
	Log    *slog.Logger
}

// NewReplica opens a pool on the replica at url without waiting for it
// (berth starts and reads from the primary while the replica is down) and
// routes to the primary until the first check finds the replica current.
func NewReplica(ctx context.Context, primary *pgxpool.Pool, url string, pc PoolConfig, rc ReplicaConfig) (*Replica, error) {
	pool, err := newPool(ctx, url, pc)
	if err != nil {
		return nil, fmt.Errorf("read replica: %w", err)
	}
	if rc.MaxLag <= 0 {
		rc.MaxLag = 5 * time.Second
	}
	if rc.Every <= 0 {
		rc.Every = time.Second
	}
	if rc.Log == nil {
		rc.Log = slog.New(slog.DiscardHandler)
	}
	return &Replica{primary: primary, replica: pool, maxLag: rc.MaxLag, every: rc.Every, log: rc.Log,
		lastErr: errors.New("not checked yet")}, nil
}

// Reads returns the pool reads should use now.
func (r *Replica) Reads() *pgxpool.Pool {
	if r.useReplica.Load() {
		return r.replica
	}
	return r.primary
}

// Lag is the replica's lag at the last check.
func (r *Replica) Lag() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lag
}

// Check reports, for /readyz, whether reads go to the replica: nil, or
// an error wrapping ErrReplicaBehind that says why not.
func (r *Replica) Check(context.Context) error {
	if r.useReplica.Load() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Errorf("%w: %w", ErrReplicaBehind, r.lastErr)
}

// Run checks the replica every interval until ctx ends.
func (r *Replica) Run(ctx context.Context) {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		r.Tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Tick samples the primary, measures the replica's lag and routes reads.
func (r *Replica) Tick(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(r.every, time.Second))
	defer cancel()
	lag, err := r.measure(ctx)
	if err == nil && lag > r.maxLag {
		err = fmt.Errorf("replica lags %s (more than %s)", lag.Round(time.Millisecond), r.maxLag)
	}
	r.mu.Lock()
	r.lag, r.lastErr = lag, err
	r.mu.Unlock()
	was := r.useReplica.Swap(err == nil)
	switch {
	case was && err != nil:
		r.log.Warn("reads go to the primary", "err", err)
	case !was && err == nil:
		r.log.Info("reads go to the replica", "lag", lag)
	}
}

func (r *Replica) measure(ctx context.Context) (time.Duration, error) {
	var primaryLSN int64
	if err := r.primary.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&primaryLSN); err != nil {
		return 0, fmt.Errorf("primary's WAL position: %w", err)
	}
	now := time.Now()
	r.mu.Lock()
	r.samples = append(r.samples, lsnSample{at: now, lsn: primaryLSN})
	// Keep what can tell a lag up to a little over MaxLag.
	for len(r.samples) > 2 && now.Sub(r.samples[1].at) > 2*r.maxLag {
		r.samples = r.samples[1:]
	}
	r.mu.Unlock()

	var replayed *int64
	if err := r.replica.QueryRow(ctx, `SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&replayed); err != nil {
		return 0, fmt.Errorf("replica: %w", err)
	}
	if replayed == nil {
		return 0, errors.New("the read database is not a replica (pg_last_wal_replay_lsn is null)")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// The newest sample the replica has replayed; its age is the lag.
	for i := len(r.samples) - 1; i >= 0; i-- {
		if r.samples[i].lsn <= *replayed {
			return now.Sub(r.samples[i].at), nil
		}
	}
	return now.Sub(r.samples[0].at), nil
}

// Close closes the replica's pool (not the primary's).
func (r *Replica) Close() { r.replica.Close() }
