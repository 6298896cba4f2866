package events_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/events"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// crashOnce makes the relay fail between publishing and marking published
// on its first `passes` passes, as a process killed there would, and
// counts the booking events (what the consumers under test want) it did
// that to.
func crashOnce(passes int, crashed *atomic.Int64) func(*outbox.Relay) {
	return func(r *outbox.Relay) {
		var n atomic.Int64
		r.AfterPublish = func(_ context.Context, msgs []outbox.Message) error {
			if n.Add(1) <= int64(passes) {
				for _, m := range msgs {
					if strings.HasPrefix(m.Type, "booking.") {
						crashed.Add(1)
					}
				}
				return errors.New("injected crash after publish")
			}
			return nil
		}
	}
}

func TestCrashBetweenPublishAndMarkDeliversTwiceActsOnce(t *testing.T) {
	t.Parallel()
	for _, kafka := range []bool{true, false} {
		name := "in-process"
		if kafka {
			name = "kafka"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "")
			reg := prometheus.NewRegistry()
			d := e.dispatcher(reg)
			rec := newRecorder("recorder")
			consumers := []events.Consumer{events.Tickets{Clock: e.clock}, rec}
			var crashed atomic.Int64
			ids := e.workload(t, 30, 12, 4, nil) // a backlog, so the crashed passes carry events
			var stop func()
			if kafka {
				stop = e.runKafka(t, newCluster(t), d, 1, consumers, crashOnce(3, &crashed))
			} else {
				stop = e.runInProcess(t, d, 1, consumers, crashOnce(3, &crashed))
			}
			e.waitDelivered(t, "recorder", time.Minute)
			if crashed.Load() == 0 {
				t.Fatal("no pass crashed")
			}
			want := int64(len(ids) * 12)
			if kafka {
				// Every event of a crashed pass arrives again and is
				// skipped (the later copies may still be on their way).
				for _, c := range []string{"recorder", events.TicketsName} {
					apptest.Eventually(t, time.Minute, c+" did not see every crashed event again", func() bool {
						return metric(t, reg, "berth_consumer_duplicates_total", c) >= float64(crashed.Load())
					})
				}
			} else {
				// In-process, the consumers work in the relay's
				// transaction: a crashed pass rolls their effects back
				// with it, and the events are handled again, each
				// effect once, each counted processed once.
				want += crashed.Load()
				for _, c := range []string{"recorder", events.TicketsName} {
					if n := metric(t, reg, "berth_consumer_duplicates_total", c); n != 0 {
						t.Errorf("%s: %g duplicates, want none: the crashed passes' work rolled back", c, n)
					}
				}
				if n := metric(t, reg, "berth_consumer_processed_total", "recorder"); n != float64(len(ids)*12) {
					t.Errorf("recorder counted %g events processed, want %d", n, len(ids)*12)
				}
			}
			stop()
			rec.check(t)
			e.checkTickets(t)
			// The backlog went in batches, and healthy consumers never
			// need the one-by-one fallback.
			for _, c := range []string{"recorder", events.TicketsName} {
				if n := metric(t, reg, "berth_consumer_batch_fallbacks_total", c); n != 0 {
					t.Errorf("%s: %g batches fell back to one by one", c, n)
				}
			}
			if n := rec.handled.Load(); n != want {
				t.Errorf("recorder handled %d events, want %d", n, want)
			}
		})
	}
}

// runInProcess runs n relays handing events to consumers in-process.
func (e *env) runInProcess(t testing.TB, d *events.Dispatcher, relays int, consumers []events.Consumer, tweak func(*outbox.Relay)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range relays {
		r := &outbox.Relay{DB: e.pool, Pub: events.InProcess{D: d, Consumers: consumers}, Clock: e.clock, Log: e.log,
			PollInterval: 20 * time.Millisecond, StreamsPerPass: 4, BatchSize: 100, MaxBackoff: 50 * time.Millisecond}
		if tweak != nil {
			tweak(r)
		}
		wg.Go(func() { r.Run(ctx) })
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// flaky fails on one booking's events while broken.
type flaky struct {
	*recorder
	booking int64
	broken  atomic.Bool
}

func (f *flaky) Handle(ctx context.Context, tx pgx.Tx, e events.Event) error {
	if e.BookingID == f.booking && f.broken.Load() {
		return fmt.Errorf("downstream refuses booking %d", e.BookingID)
	}
	return f.recorder.Handle(ctx, tx, e)
}

func TestFailingConsumerParksOneBookingOthersGoOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	reg := prometheus.NewRegistry()
	d := e.dispatcher(reg)
	ids := e.workload(t, 10, 12, 2, nil)
	bad := &flaky{recorder: newRecorder("recorder"), booking: ids[3]}
	bad.broken.Store(true)
	consumers := []events.Consumer{events.Tickets{Clock: e.clock}, bad}
	stop := e.runInProcess(t, d, 2, consumers, nil)
	// Every event leaves the outbox (taken: processed or parked) ...
	apptest.Eventually(t, time.Minute, "events still in the outbox: one failing booking blocks the others", func() bool {
		var left int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
	stop()
	// ... the failing booking's 12 events wait, in order, for that consumer only.
	if n := e.parked(t); n != 12 {
		t.Errorf("%d events parked, want booking %d's 12", n, ids[3])
	}
	// Processed means committed: a batch that failed on booking ids[3]
	// rolled back and went again one by one, so Handle itself may have run
	// twice for some events (at least once), but their effects count once.
	if got := metric(t, reg, "berth_consumer_processed_total", "recorder"); got != 9*12 {
		t.Errorf("the failing consumer processed %g events, want the other 9 bookings' 108", got)
	}
	if got := bad.handled.Load(); got < 9*12 {
		t.Errorf("the failing consumer's Handle ran %d times, want at least the other 9 bookings' 108", got)
	}
	bad.check(t)
	if f := metric(t, reg, "berth_consumer_failures_total", "recorder"); f < 2 {
		t.Errorf("failures metric %v, want the attempts counted", f)
	}
	retrier := &events.Retrier{D: d, Consumers: consumers, BaseBackoff: time.Minute, MaxBackoff: time.Hour}
	if n, err := retrier.Pass(context.Background()); err != nil || n != 0 {
		t.Errorf("retrier tried %d before the backoff elapsed (%v)", n, err)
	}
	if g := metric(t, reg, "berth_consumer_parked_events", "recorder"); g != 12 {
		t.Errorf("parked gauge %v, want 12", g)
	}
	// Still failing after the backoff: tried again, still parked, later.
	e.clock.Advance(2 * time.Minute)
	if n, err := retrier.Pass(context.Background()); err != nil || n != 1 {
		t.Errorf("retrier tried %d (%v), want the head only", n, err)
	}
	var attempts int
	var next time.Time
	if err := e.pool.QueryRow(context.Background(), `SELECT attempts, next_attempt FROM consumer_parked ORDER BY seq LIMIT 1`).Scan(&attempts, &next); err != nil {
		t.Fatal(err)
	}
	if attempts != 3 || !next.After(e.clock.Now()) {
		t.Errorf("head: %d attempts, next at %s (now %s)", attempts, next, e.clock.Now())
	}
	// Repaired: the whole backlog of that booking goes through, in order.
	bad.broken.Store(false)
	e.clock.Advance(time.Hour)
	if n, err := retrier.Pass(context.Background()); err != nil || n != 12 {
		t.Errorf("retrier processed %d (%v), want 12", n, err)
	}
	if n := e.parked(t); n != 0 {
		t.Errorf("%d still parked", n)
	}
	e.waitDelivered(t, "recorder", 10*time.Second)
	bad.check(t)
	e.checkTickets(t)
}

func TestBrokerDownBacklogGrowsServeAnswersThenDrains(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	c := newCluster(t)
	rec := newRecorder("recorder")
	s := apptest.Start(t, apptest.Options{DatabaseURL: e.url,
		Config: func(cfg *config.Config) { cfg.KafkaBrokers = c.ListenAddrs() },
		App: func(o *app.Options) {
			o.Consumers = []events.Consumer{rec}
			o.EventSettings = func(s *events.Settings) {
				s.KafkaOpts = fastGroup
				s.PublishTimeout = 2 * time.Second
				s.PollInterval = 100 * time.Millisecond
			}
		}})
	e.clock = s.Clock
	e.life = s.App.Life
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 500_000, Seats: apptest.Seats(1, 10, "ABCDEF")})
	customer := s.Customer(42)
	holdSeat := func(seat string) int64 {
		return customer.HoldSeats(t, flightID, "ECONOMY", seat).BookingID
	}
	first := holdSeat("1A")
	_ = first
	e.waitDelivered(t, "recorder", time.Minute)

	c.setDown(true)
	published := metricApp(t, s, "berth_outbox_published_total")
	var ids []int64
	for _, seat := range apptest.Seats(2, 5, "ABCDEF") {
		ids = append(ids, holdSeat(seat))
	}
	for i, id := range ids {
		var err error
		switch i % 3 {
		case 0:
			err = e.confirm(context.Background(), id)
		case 1:
			if _, p := customer.TryCancel(t, id); p != nil {
				t.Errorf("cancel %d while the broker is down: %s", id, p)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The relay tried, failed, and kept every event.
	apptest.Eventually(t, time.Minute, "no failed publish while the broker was down", func() bool {
		return metricApp(t, s, "berth_outbox_publish_errors_total") > 0
	})
	var backlog int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&backlog); err != nil {
		t.Fatal(err)
	}
	if want := len(ids) + len(ids)/3*2; backlog < want {
		t.Errorf("backlog %d events while the broker is down, want at least %d", backlog, want)
	}
	if got := metricApp(t, s, "berth_outbox_published_total"); got != published {
		t.Errorf("%v events reported published while the broker was down", got-published)
	}
	c.setDown(false)
	e.waitDelivered(t, "recorder", 2*time.Minute)
	rec.check(t)
	e.checkTickets(t)
}

func metricApp(t testing.TB, s *apptest.Server, name string) float64 {
	t.Helper()
	return metric(t, s.App.Registry, name, "")
}

// TestBatchTheDatabaseRefusedFailsWhole: when the database refuses the
// connection, a consumer's batch fails as it is, with the database's
// error, for the relay to offer again; its events are not tried one by one
// against a database that is not there.
func TestBatchTheDatabaseRefusedFailsWhole(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	d := &events.Dispatcher{DB: pgtest.Refusing(t), Clock: clock.System{}, Log: slog.New(slog.DiscardHandler),
		Metrics: events.NewMetrics(reg), Attempts: 2, Workers: 1}
	rec := newRecorder("recorder")
	evs := []events.Event{
		{ID: "e1", Type: outbox.BookingHeld, BookingID: 1, Time: time.Now()},
		{ID: "e2", Type: outbox.BookingHeld, BookingID: 2, Time: time.Now()},
	}
	err := d.DeliverAll(context.Background(), []events.Consumer{rec}, evs)
	if !pg.Refused(err) {
		t.Fatalf("DeliverAll: %v, want the database's refusal", err)
	}
	if n := metric(t, reg, "berth_consumer_batch_fallbacks_total", "recorder"); n != 0 {
		t.Errorf("%g refused batches went one by one", n)
	}
	if n := rec.handled.Load(); n != 0 {
		t.Errorf("the consumer handled %d events without a database", n)
	}
}
