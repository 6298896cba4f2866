package httpapi

import (
	"bytes"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

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

// scrapeFor is how long one gathering of the registry answers GET
// /metrics. The route is public and never limited (Prometheus scrapes each
// process directly, every few seconds), and gathering and encoding every
// series costs milliseconds of CPU: a flood of scrapes must not cost that
// each, only ten a second (a few percent of a core). A tenth of a second
// is still fresh for anyone who reads twice to measure what happened in
// between.
const scrapeFor = 100 * time.Millisecond

// scrapes serves the registry in Prometheus's text format, gathered at
// most once per scrapeFor; scrapes that come meanwhile share it.
type scrapes struct {
	reg    prometheus.Gatherer
	latest fresh[*scrape]
}

type scrape struct {
	body []byte
	err  error
}

func (sc *scrapes) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	cur := sc.latest.get(scrapeFor, sc.gather)
	if cur.err != nil {
		http.Error(w, cur.err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	_, _ = w.Write(cur.body)
}

func (sc *scrapes) gather() *scrape {
	out := &scrape{}
	var buf bytes.Buffer
	mfs, err := sc.reg.Gather()
	if err == nil {
		enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err = enc.Encode(mf); err != nil {
				break
			}
		}
	}
	out.body, out.err = buf.Bytes(), err
	return out
}
