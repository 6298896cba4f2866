// Package pg opens berth's PostgreSQL pool, applies the embedded migrations
// and runs transactions. It is the only place that knows how pgx is wired;
// domain packages receive a *pgxpool.Pool or a pgx.Tx and own their SQL.
package pg

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SQLSTATE codes berth recognises.
const (
	UniqueViolation      = "23505"
	ExclusionViolation   = "23P01"
	CheckViolation       = "23514"
	ForeignKeyViolation  = "23503"
	SerializationFailure = "40001"
	DeadlockDetected     = "40P01"
)

// PoolConfig tunes the pool. Zero values take pgx's defaults.
type PoolConfig struct {
	MaxConns int32
	MinConns int32
	// AppName is reported in pg_stat_activity.
	AppName string
	// Tracer, when set, traces queries; one that is also a
	// pgxpool.AcquireTracer sees (and may bound) every connection acquire.
	Tracer pgx.QueryTracer
	// Params are extra session settings sent when connecting.
	Params map[string]string
	// Warm, when set, warms every connection the pool makes before the
	// pool hands it out (see Warmer).
	Warm *Warmer
}

// Open connects to url and checks the connection.
func Open(ctx context.Context, url string, pc PoolConfig) (*pgxpool.Pool, error) {
	pool, err := newPool(ctx, url, pc)
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	warm(pingCtx, pool, int(pool.Config().MinConns))
	if pc.Warm != nil {
		pc.Warm.serving.Store(true)
	}
	return pool, nil
}

// newPool makes a pool for url without connecting (MinConns aside).
func newPool(ctx context.Context, url string, pc PoolConfig) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if pc.MaxConns > 0 {
		cfg.MaxConns = pc.MaxConns
	}
	if pc.MinConns > 0 {
		cfg.MinConns = pc.MinConns
	}
	if pc.AppName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = pc.AppName
	}
	// Every session works in UTC so that casts to date and text never depend
	// on the server's setting.
	cfg.ConnConfig.RuntimeParams["timezone"] = "UTC"
	for k, v := range pc.Params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	if pc.Tracer != nil {
		cfg.ConnConfig.Tracer = pc.Tracer
	}
	if pc.Warm != nil {
		cfg.AfterConnect = pc.Warm.afterConnect
		cfg.BeforeClose = pc.Warm.forget
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, nil
}

// Beginner is what InTx needs: a pool or a single connection.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// maxAttempts bounds how often InTx retries a transaction that PostgreSQL
// aborted to break a deadlock or a serialization conflict.
const maxAttempts = 5

// InTx runs fn in a transaction and commits it, or rolls it back when fn
// returns an error. A transaction that PostgreSQL aborted with a deadlock or
// a serialization failure is retried from the start (fn must be safe to run
// again), so those never reach a client.
func InTx(ctx context.Context, db Beginner, fn func(tx pgx.Tx) error) error {
	return Retry(ctx, func() error { return pgx.BeginFunc(ctx, db, fn) })
}

// Retry runs fn, a transaction (or a statement that commits by itself), and
// runs it again, after a short random pause, while PostgreSQL aborts it to
// break a deadlock or a serialization conflict: at most maxAttempts times.
func Retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = fn()
		if err == nil || attempt == maxAttempts || !retryable(err) {
			return err
		}
		backoff := time.Duration(attempt*attempt) * time.Millisecond * time.Duration(1+rand.IntN(5))
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(backoff):
		}
	}
}

func retryable(err error) bool {
	code := State(err)
	return code == DeadlockDetected || code == SerializationFailure
}

// State returns the SQLSTATE of err, or "" when err did not come from the
// server.
func State(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Violates reports whether err is the server refusing a statement because of
// the named constraint.
func Violates(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.ConstraintName == constraint
}
