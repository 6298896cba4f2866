package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the relay's instruments. One set serves every relay of a
// process.
type Metrics struct {
	published     prometheus.Counter
	publishErrors prometheus.Counter
	passes        prometheus.Counter
	publishTime   prometheus.Histogram
	delay         prometheus.Histogram
	backlogRows   prometheus.Gauge
	backlogAge    prometheus.Gauge
	deleted       prometheus.Counter
}

// NewMetrics registers the relay's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		published:     prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_outbox_published_total", Help: "Outbox events published."}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_outbox_publish_errors_total", Help: "Relay passes whose publishing failed; their events are published again later."}),
		passes:        prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_outbox_relay_passes_total", Help: "Relay passes that claimed events."}),
		publishTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "berth_outbox_publish_seconds", Help: "Time to publish one batch (Kafka acks, or every in-process consumer done).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14)}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "berth_outbox_publish_delay_seconds", Help: "Time from an event's commit to its publication.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 16)}),
		backlogRows: prometheus.NewGauge(prometheus.GaugeOpts{Name: "berth_outbox_backlog_events", Help: "Outbox events not yet published."}),
		backlogAge:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "berth_outbox_oldest_unpublished_seconds", Help: "Age of the oldest unpublished outbox event (0 when none)."}),
		deleted:     prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_outbox_deleted_total", Help: "Published outbox events deleted after the retention period."}),
	}
	reg.MustRegister(m.published, m.publishErrors, m.passes, m.publishTime, m.delay, m.backlogRows, m.backlogAge, m.deleted)
	return m
}

// Backlog is what is waiting in the outbox.
type Backlog struct {
	Rows   int64
	Oldest time.Time // zero when nothing waits
}

// ReadBacklog counts the unpublished events and finds the oldest.
func ReadBacklog(ctx context.Context, db Querier) (Backlog, error) {
	var b Backlog
	var oldest *time.Time
	err := db.QueryRow(ctx, `SELECT count(*), min(created_at) FROM outbox WHERE published_at IS NULL`).Scan(&b.Rows, &oldest)
	if err != nil {
		return b, fmt.Errorf("read outbox backlog: %w", err)
	}
	if oldest != nil {
		b.Oldest = *oldest
	}
	return b, nil
}

// observeBacklog sets the backlog gauges.
func (m *Metrics) observeBacklog(b Backlog, now time.Time) {
	m.backlogRows.Set(float64(b.Rows))
	age := 0.0
	if !b.Oldest.IsZero() {
		age = max(now.Sub(b.Oldest).Seconds(), 0)
	}
	m.backlogAge.Set(age)
}
