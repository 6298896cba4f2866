package events_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/events"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
)

// stamp is a consumer that notes when it handled each booking's event.
type stamp struct {
	mu   sync.Mutex
	at   map[int64]time.Time
	seen int
	all  chan struct{}
	want int
}

func (s *stamp) Name() string { return "stamp" }
func (s *stamp) Handle(_ context.Context, _ pgx.Tx, e events.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.at[e.BookingID]; !dup {
		s.at[e.BookingID] = time.Now()
		s.seen++
		if s.seen == s.want {
			close(s.all)
		}
	}
	return nil
}

// TestMeasureRelayThroughputAndLatency measures, for Kafka (kfake) and the
// in-process path: events per second drained from a backlog through one
// relay to one consumer (which records each event as processed), and the
// time from a change's commit to the consumer under a steady 200 changes a
// second. It only runs when BERTH_EVENTS_MEASURE=1:
//
//	BERTH_EVENTS_MEASURE=1 ./scripts/testenv.sh go test -count=1 -run TestMeasure -v ./internal/events/
func TestMeasureRelayThroughputAndLatency(t *testing.T) {
	if os.Getenv("BERTH_EVENTS_MEASURE") == "" {
		t.Skip("set BERTH_EVENTS_MEASURE=1 to measure")
	}
	for _, mode := range []string{"kafka", "in-process"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, "")
			const backlog = 20_000
			// Throughput: a backlog drained by one relay.
			_, err := e.pool.Exec(context.Background(), `INSERT INTO outbox (booking_id, type, payload, created_at)
				SELECT b, 'booking.held', jsonb_build_object('bookingId', b), $2 FROM generate_series(1, $1::int) b`, backlog, epoch)
			if err != nil {
				t.Fatal(err)
			}
			s := &stamp{at: map[int64]time.Time{}, all: make(chan struct{}), want: backlog}
			d := e.dispatcher(prometheus.NewRegistry())
			d.Workers = 8
			start := time.Now()
			var stop func()
			if mode == "kafka" {
				stop = e.runKafka(t, newCluster(t), d, 1, []events.Consumer{s}, func(r *outbox.Relay) { r.StreamsPerPass = 64; r.BatchSize = 1000 })
			} else {
				stop = e.runInProcess(t, d, 1, []events.Consumer{s}, func(r *outbox.Relay) { r.StreamsPerPass = 64; r.BatchSize = 1000 })
			}
			// The relay alone: until the outbox is empty (Kafka: acked).
			for {
				var left int
				if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&left); err != nil {
					t.Fatal(err)
				}
				if left == 0 || time.Since(start) > 5*time.Minute {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			relayed := time.Since(start)
			t.Logf("%s: relay published %d events in %s: %.0f events/s", mode, backlog, relayed.Round(time.Millisecond), float64(backlog)/relayed.Seconds())
			select {
			case <-s.all:
			case <-time.After(5 * time.Minute):
				t.Fatalf("only %d of %d consumed", s.seen, backlog)
			}
			elapsed := time.Since(start)
			t.Logf("%s: consumer processed %d events in %s: %.0f events/s", mode, backlog, elapsed.Round(time.Millisecond), float64(backlog)/elapsed.Seconds())

			// Latency: 200 changes a second for 3 s, one event each.
			const n, rate = 600, 200
			s.mu.Lock()
			s.want, s.seen, s.all = backlog+n, backlog, make(chan struct{})
			s.mu.Unlock()
			committed := make(map[int64]time.Time, n)
			tick := time.NewTicker(time.Second / rate)
			for i := range n {
				<-tick.C
				id := int64(backlog + 1 + i)
				err := pg.InTx(context.Background(), e.pool, func(tx pgx.Tx) error {
					return outbox.Write(context.Background(), tx, outbox.Event{BookingID: id, Type: outbox.BookingHeld, Data: map[string]int64{"bookingId": id}, Time: epoch})
				})
				if err != nil {
					t.Fatal(err)
				}
				committed[id] = time.Now()
			}
			tick.Stop()
			select {
			case <-s.all:
			case <-time.After(time.Minute):
				t.Fatalf("paced events not all consumed")
			}
			stop()
			lat := make([]time.Duration, 0, n)
			s.mu.Lock()
			for id, c := range committed {
				lat = append(lat, max(s.at[id].Sub(c), 0))
			}
			s.mu.Unlock()
			slices.Sort(lat)
			t.Logf("%s: commit → consumer at %d/s: median %s, p99 %s, max %s", mode, rate,
				lat[len(lat)/2].Round(10*time.Microsecond), lat[len(lat)*99/100].Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond))
		})
	}
}
