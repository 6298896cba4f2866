package guard

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/base"
	"berth.dev/berth/internal/clock"
)

// BenchmarkLoneHold is what the layers cost a hold nobody competes with:
// one caller, one seat at a time on a flight without a waiting room,
// against the test Redis (auto-pipelined, as berth runs it). The hold
// itself does nothing, so the time is the layers' alone; p50-us is the
// median of Guard.Hold. quiet is berth as it runs (a lone hold skips the
// seat gate); gate has every hold pass the gate (QuietHolds < 0), which
// is what each hold of a crowd pays.
//
//	./scripts/testenv.sh go test -run '^$' -bench LoneHold -benchtime 3000x ./internal/guard/
func BenchmarkLoneHold(b *testing.B) {
	b.Run("quiet", func(b *testing.B) { benchLoneHold(b, 0) })
	b.Run("gate", func(b *testing.B) { benchLoneHold(b, -1) })
}

func benchLoneHold(b *testing.B, quiet int) {
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	rdb := openTestRedis(b, RedisOptions{AutoPipeline: true})
	g := New(base.Archetype{Log: log, Clock: clock.System{}, Registry: prometheus.NewRegistry()},
		Config{On: true, QuietHolds: quiet, Lanes: LanesFor(16),
			ShedWait: 150 * time.Millisecond, HoldTTL: 10 * time.Minute}, rdb, nil)
	// No database here: a view of the rooms' settings (none on) that stays fresh.
	g.Room.settings.Store(&roomSnapshot{rooms: map[int64]int{}, loaded: time.Now().Add(time.Hour)})
	for _, s := range scripts {
		if err := s.Load(ctx, rdb.Client).Err(); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		in := Intent{Customer: 7, FlightID: int64(1 + i/1000), FareClass: "ECONOMY", Seats: []string{fmt.Sprintf("S%d", i%1000)}, Units: 1}
		start := time.Now()
		if err := g.Hold(ctx, in, func(context.Context) error { return nil }); err != nil {
			b.Fatalf("hold %d: %v", i, err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1000, "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1000, "p99-us")
}
