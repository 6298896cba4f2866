package guard_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
)

// start runs berth with the surge layers on a Redis shared with nobody
// else (its own key prefix) and the settings mut changes. Every hold
// passes the seat gate, even one the process would let skip it for being
// quiet (guard.Config.QuietHolds), so that the gate is what these tests
// see.
func start(t *testing.T, dbURL, redisURL, prefix string, mut func(*config.Config)) *apptest.Server {
	t.Helper()
	return apptest.Start(t, apptest.Options{DatabaseURL: dbURL, RedisURL: redisURL, RedisPrefix: prefix, Config: mut,
		App: func(o *app.Options) { o.QuietHolds = -1 }})
}

// metric sums the series of the counter or gauge name whose labels include
// want, as the server's /metrics would show them.
func metric(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				sum += g.GetValue()
			}
		}
	}
	return sum
}

// dbHolds is how many holds reached the database.
func dbHolds(t *testing.T, s *apptest.Server) int {
	t.Helper()
	return int(metric(t, s.App.Registry, "berth_holds_total", nil))
}

func turnedAway(t *testing.T, s *apptest.Server, reason string) int {
	t.Helper()
	return int(metric(t, s.App.Registry, "berth_guard_turned_away_total", map[string]string{"reason": reason}))
}

func redisClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustAudit(t *testing.T, s *apptest.Server) {
	t.Helper()
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}

// retryAfter reads a Retry-After header's value v, failing t unless it
// is a positive number of seconds.
func retryAfter(t *testing.T, v string) int {
	t.Helper()
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Errorf("Retry-After %q, want a positive number of seconds", v)
	}
	return n
}

func path(format string, args ...any) string { return fmt.Sprintf(format, args...) }
