package events_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"berth.dev/berth/internal/events"
	"berth.dev/berth/internal/outbox"
)

// topic is the Kafka topic of these tests.
const topic = "booking-events"

// cluster is an in-process Kafka (kfake speaks the real protocol) whose
// brokers can be taken down for producers and brought back.
type cluster struct {
	*kfake.Cluster
	down atomic.Bool
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	c := &cluster{Cluster: kc}
	return c
}

// setDown makes every produce request fail by closing the connection, as a
// dead broker would, until it is set up again.
func (c *cluster) setDown(down bool) {
	c.down.Store(down)
	if down {
		c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			if !c.down.Load() {
				c.DropControl()
				return nil, nil, false
			}
			c.KeepControl()
			return nil, errors.New("broker down"), true
		})
	}
}

// fastGroup shortens franz-go's group and retry timings for tests.
var fastGroup = []kgo.Opt{
	kgo.FetchMaxWait(200 * time.Millisecond),
	kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
}

// runKafka runs n relays (each with its own producer, as separate
// processes would have) and a consumer group runner per consumer, until
// the returned stop is called.
func (e *env) runKafka(t testing.TB, c *cluster, d *events.Dispatcher, relays int, consumers []events.Consumer, tweak func(*outbox.Relay)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var producers []*outbox.Kafka
	for range relays {
		k, err := outbox.NewKafka(c.ListenAddrs(), topic, 3*time.Second, fastGroup...)
		if err != nil {
			t.Fatal(err)
		}
		producers = append(producers, k)
		wake := make(chan struct{}, 1)
		connect := func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig)
		}
		wg.Go(func() {
			outbox.Listen(ctx, connect, func() {
				select {
				case wake <- struct{}{}:
				default:
				}
			}, e.log)
		})
		r := &outbox.Relay{DB: e.pool, Pub: k, Clock: e.clock, Log: e.log, Wake: wake, PollInterval: 200 * time.Millisecond,
			StreamsPerPass: 4, BatchSize: 200, PassTimeout: 5 * time.Second, MaxBackoff: 200 * time.Millisecond}
		if tweak != nil {
			tweak(r)
		}
		wg.Go(func() { r.Run(ctx) })
	}
	for _, cons := range consumers {
		runner := &events.KafkaRunner{Brokers: c.ListenAddrs(), Topic: topic, Group: "berth-" + cons.Name(),
			Consumer: cons, D: d, Extra: fastGroup}
		wg.Go(func() {
			if err := runner.Run(ctx); err != nil {
				t.Errorf("runner %s: %v", cons.Name(), err)
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
		for _, p := range producers {
			p.Close()
		}
	}
}

func TestKafkaThreeRelaysTenThousandChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	c := newCluster(t)
	reg := prometheus.NewRegistry()
	d := e.dispatcher(reg)
	rec := newRecorder("recorder")
	stop := e.runKafka(t, c, d, 3, []events.Consumer{events.Tickets{Clock: e.clock}, rec}, nil)
	defer stop()

	start := time.Now()
	ids := e.workload(t, 500, 20, 16, nil)
	written := time.Since(start)
	e.waitDelivered(t, "recorder", 3*time.Minute)
	t.Logf("10,000 changes of %d bookings written in %s, all consumed %s after the first", len(ids), written, time.Since(start))
	stop()

	rec.check(t)
	e.checkTickets(t)
	if n := rec.handled.Load(); n != 10_000 {
		t.Errorf("recorder processed %d events, want each of the 10,000 once", n)
	}
	if n := e.parked(t); n != 0 {
		t.Errorf("%d events parked", n)
	}
	var unpublished int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&unpublished); err != nil || unpublished != 0 {
		t.Errorf("%d events unpublished (%v)", unpublished, err)
	}
}
