package events

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the consumers' instruments, labelled by consumer name. One
// set serves every dispatcher of a process.
type Metrics struct {
	processed  *prometheus.CounterVec
	duplicates *prometheus.CounterVec
	failures   *prometheus.CounterVec
	parkedNew  *prometheus.CounterVec
	fallbacks  *prometheus.CounterVec
	timeouts   *prometheus.CounterVec
	parked     *prometheus.GaugeVec
	lag        *prometheus.HistogramVec
	deleted    prometheus.Counter
	undecoded  prometheus.Counter
}

// NewMetrics registers the consumers' metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berth_consumer_processed_total",
			Help: "Events a consumer processed (its effect committed)."}, []string{"consumer"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berth_consumer_duplicates_total",
			Help: "Events delivered again to a consumer that had already processed them, and skipped."}, []string{"consumer"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berth_consumer_failures_total",
			Help: "Failed attempts of a consumer to process an event."}, []string{"consumer"}),
		parkedNew: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berth_consumer_parked_total",
			Help: "Events set aside for retry with backoff (failed, or behind a failed event of the same booking)."}, []string{"consumer"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berth_consumer_batch_fallbacks_total",
			Help: "Batches of events whose one transaction failed and that were delivered one by one instead."}, []string{"consumer"}),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berth_consumer_timeouts_total",
			Help: "Batches (or parked events) a consumer did not finish within its bound; their events were parked for it."}, []string{"consumer"}),
		parked: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "berth_consumer_parked_events",
			Help: "Events waiting for a retry, per consumer."}, []string{"consumer"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "berth_consumer_lag_seconds",
			Help:    "Time from an event's commit to a consumer's processing of it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 16)}, []string{"consumer"}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_consumer_records_deleted_total",
			Help: "Processed-event records deleted after the retention period."}),
		undecoded: prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_consumer_undecodable_total",
			Help: "Kafka records that were not berth CloudEvents and were skipped."}),
	}
	reg.MustRegister(m.processed, m.duplicates, m.failures, m.parkedNew, m.fallbacks, m.timeouts, m.parked, m.lag, m.deleted, m.undecoded)
	return m
}
