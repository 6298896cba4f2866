package pg

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// RoundTrips is a query tracer that counts the round trips a pool makes
// to PostgreSQL: each statement sent on its own, and each pipelined batch
// once, as berth_db_round_trips_total. `berth bench` divides its growth by
// the holds made to report round trips per hold.
type RoundTrips struct{ c prometheus.Counter }

// NewRoundTrips registers the counter with reg.
func NewRoundTrips(reg prometheus.Registerer) *RoundTrips {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_db_round_trips_total",
		Help: "Round trips to PostgreSQL: statements sent on their own, and pipelined batches, once each."})
	reg.MustRegister(c)
	return &RoundTrips{c: c}
}

type inBatchKey struct{}

// TraceQueryStart counts a statement that is not part of a batch.
func (t *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if ctx.Value(inBatchKey{}) == nil {
		t.c.Inc()
	}
	return ctx
}

// TraceQueryEnd does nothing.
func (t *RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch.
func (t *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.c.Inc()
	return context.WithValue(ctx, inBatchKey{}, true)
}

// TraceBatchQuery does nothing.
func (t *RoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd does nothing.
func (t *RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
