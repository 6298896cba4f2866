package httpapi_test

import (
	"log/slog"
	"net/http"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/guard"
	"berth.dev/berth/internal/httpapi"
)

// The route table is what the surge layers read: money (the gateway's
// webhooks, payment starts, cancellations that refund) is never shed, and
// nothing but the probes, the metrics and the webhook escapes the limits.
func TestMoneyIsNeverShedAndOnlyProbesEscapeLimits(t *testing.T) {
	t.Parallel()
	s := httpapi.New(httpapi.Deps{Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
		PaySim: http.NotFoundHandler(), Dev: true})
	lanes := map[string]guard.Lane{}
	for _, r := range s.Routes() {
		lanes[r.Pattern()] = r.Lane
		if r.Idempotency != httpapi.NoKey && r.Method != http.MethodPost {
			t.Errorf("%s takes an Idempotency-Key: only a POST may", r.Pattern())
		}
	}
	for pattern, want := range map[string]guard.Lane{
		"POST /payments/webhook":       guard.LaneNone,
		"POST /bookings/{id}/payments": guard.LaneMoney,
		"DELETE /bookings/{id}":        guard.LaneMoney,
		"POST /bookings/{id}/cancel":   guard.LaneMoney,
		"POST /bookings":               guard.LaneHold,
	} {
		if got, ok := lanes[pattern]; !ok || got != want {
			t.Errorf("%s: lane %q (routed: %v), want %q", pattern, got, ok, want)
		}
	}
	unlimited := []string{"GET /healthz", "GET /readyz", "GET /metrics", "POST /payments/webhook"}
	for pattern, lane := range lanes {
		if lane == guard.LaneNone && !slices.Contains(unlimited, pattern) {
			t.Errorf("%s is never limited nor shed; only %v may be", pattern, unlimited)
		}
	}
}
