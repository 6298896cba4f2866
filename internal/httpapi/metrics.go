package httpapi

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/fault"
)

type metrics struct {
	requests *prometheus.HistogramVec
	holds    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "berth_http_request_duration_seconds",
			Help:    "Time to answer HTTP requests, by route and status.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route", "status"}),
		holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_holds_total",
			Help: "Holds asked of the database, by kind and outcome (held, or the error code); the surge layers count the ones they turn away before it.",
		}, []string{"kind", "outcome"}),
	}
	reg.MustRegister(m.requests, m.holds)
	return m
}

func (m *metrics) observe(route string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Observe(d.Seconds())
}

func (m *metrics) hold(kind string, err error) {
	outcome := "held"
	if err != nil {
		outcome = string(fault.CodeOf(err))
		if outcome == "" {
			outcome = "error"
		}
	}
	m.holds.WithLabelValues(kind, outcome).Inc()
}
