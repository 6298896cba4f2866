// Package base is what berth's long-lived services are built on: the
// logger they write to, the clock they decide by and the registry their
// metrics go to. app.New makes one Archetype and hands it to each service's
// constructor, beside that service's own settings, so a constructor's
// signature says what is particular to it.
package base

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/clock"
)

// Archetype is the shared base of a service.
type Archetype struct {
	Log      *slog.Logger
	Clock    clock.Clock
	Registry prometheus.Registerer
}

// Test returns an Archetype for tests: a discarding logger, clock c and a
// fresh registry.
func Test(c clock.Clock) Archetype {
	return Archetype{Log: slog.New(slog.DiscardHandler), Clock: c, Registry: prometheus.NewRegistry()}
}
