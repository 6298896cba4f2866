package httpapi

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/auth"
)

// A dependency's readiness is logged when it changes, not at every probe.
func TestReadinessIsLoggedWhenItChanges(t *testing.T) {
	var buf bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&buf, nil)), readiness: map[string]string{}}
	down := errors.Join(ErrDegraded, errors.New("dial tcp: connection refused"))
	for _, state := range []string{"ok", "ok", "degraded", "degraded", "degraded", "ok", "ok", "unavailable", "unavailable"} {
		var err error
		switch state {
		case "degraded":
			err = down
		case "unavailable":
			err = errors.New("no database")
		}
		s.noteReadiness("redis", state, err)
	}
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		_, rest, _ := strings.Cut(line, "msg=")
		msgs = append(msgs, strings.Fields(rest)[0])
	}
	if got, want := strings.Join(msgs, ","), `degraded,"ready,"not`; got != want {
		t.Errorf("logged %q:\n%s\nwant one line per change (%s)", got, buf.String(), want)
	}
}

// A flood of probes and scrapes costs one check of each dependency and one
// gathering of the metrics a second, not one each: those that come while
// one runs share its answer, and an answer serves for a second.
func TestProbesAndScrapesShareOneCheck(t *testing.T) {
	var checks atomic.Int64
	slow := func(context.Context) error {
		checks.Add(1)
		time.Sleep(20 * time.Millisecond)
		return nil
	}
	s := &Server{Deps: Deps{Ready: map[string]func(context.Context) error{"redis": slow}}, log: slog.New(slog.DiscardHandler), readiness: map[string]string{}}
	reg := prometheus.NewRegistry()
	var gathers atomic.Int64
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "berth_test_gathers", Help: "gatherings"}, func() float64 {
		time.Sleep(20 * time.Millisecond)
		return float64(gathers.Add(1))
	}))
	sc := &scrapes{reg: reg}
	const n = 40
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			w := httptest.NewRecorder()
			if err := s.readyz(w, httptest.NewRequest(http.MethodGet, "/readyz", nil), auth.Caller{}); err != nil || w.Code != http.StatusOK {
				t.Errorf("readyz: %v %d", err, w.Code)
			}
			w = httptest.NewRecorder()
			sc.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "berth_test_gathers ") {
				t.Errorf("metrics: %d %q", w.Code, w.Body.String())
			}
		})
	}
	wg.Wait()
	// All n came at once: one or two checks, not n; a few gatherings
	// (one at a time, each serving a tenth of a second).
	if c, g := checks.Load(), gathers.Load(); c > 2 || g > 8 {
		t.Errorf("%d probes made %d checks and %d scrapes %d gatherings; want one or two checks, a few gatherings", n, c, n, g)
	}
	time.Sleep(readyFor + 50*time.Millisecond)
	before := checks.Load()
	_ = s.readyz(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/readyz", nil), auth.Caller{})
	if checks.Load() != before+1 {
		t.Errorf("a probe after %v made %d checks, want a fresh one", readyFor, checks.Load()-before)
	}
}
