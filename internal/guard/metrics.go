package guard

import "github.com/prometheus/client_golang/prometheus"

// metrics count what each layer did, so an operator sees who was turned
// away and why, and whether Redis is failing.
type metrics struct {
	admitted    *prometheus.CounterVec
	turnedAway  *prometheus.CounterVec
	fallback    *prometheus.CounterVec
	redisErrors *prometheus.CounterVec
	redisUp     prometheus.Gauge
	inflight    *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_guard_admitted_total",
			Help: "Requests a surge layer let through, by layer (waiting_room: a valid admission token; seat_gate: all seat keys taken).",
		}, []string{"layer"}),
		turnedAway: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_guard_turned_away_total",
			Help: "Requests turned away before the database, by reason (waiting_room, sold_out_hint, seat_gate, hold_limit (decided by the database), request_limit, shed_<lane>, shed_acquire, …).",
		}, []string{"reason"}),
		fallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_guard_fallback_total",
			Help: "Decisions taken without Redis (stepped aside or per-process limits), by layer.",
		}, []string{"layer"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_guard_redis_errors_total",
			Help: "Redis commands that failed, by operation.",
		}, []string{"op"}),
		redisUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berth_guard_redis_up",
			Help: "1 while Redis answers, 0 while the layers step aside.",
		}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "berth_guard_lane_inflight",
			Help: "Requests inside each lane's concurrency limit.",
		}, []string{"lane"}),
	}
	reg.MustRegister(m.admitted, m.turnedAway, m.fallback, m.redisErrors, m.redisUp, m.inflight)
	return m
}
