package pgtest

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// RoundTrips is a pool tracer (pg.PoolConfig.Tracer) that records the
// round trips the pool's connections make: each statement sent on its own
// (its SQL, spaces folded) and each pipelined batch once ("pipeline").
type RoundTrips struct {
	mu    sync.Mutex
	trips []string
}

type inBatchKey struct{}

func (c *RoundTrips) add(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips = append(c.trips, what)
}

// Taken returns the round trips so far, in order.
func (c *RoundTrips) Taken() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.trips...)
}

// Len returns how many round trips were made so far.
func (c *RoundTrips) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.trips)
}

// TraceQueryStart records a statement sent on its own.
func (c *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if ctx.Value(inBatchKey{}) == nil {
		c.add(strings.Join(strings.Fields(d.SQL), " "))
	}
	return ctx
}

// TraceQueryEnd does nothing.
func (c *RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart records a pipelined batch.
func (c *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.add("pipeline")
	return context.WithValue(ctx, inBatchKey{}, true)
}

// TraceBatchQuery does nothing: the batch is one round trip.
func (c *RoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd does nothing.
func (c *RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
