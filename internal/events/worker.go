package events

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"berth.dev/berth/internal/base"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/outbox"
)

// Settings configure a process's event machinery. Zero values take the
// defaults, but for KafkaTopic (with KafkaBrokers) and Retention, which
// are required: their defaults are berth's settings' (internal/config).
type Settings struct {
	// KafkaBrokers selects Kafka; without them events go from the outbox to
	// the consumers in-process.
	KafkaBrokers []string
	KafkaTopic   string
	// KafkaGroupPrefix precedes each consumer's name to form its group.
	KafkaGroupPrefix string // default "berth-"
	// Relays is how many relays this process runs (several processes may
	// each run theirs).
	Relays         int
	PollInterval   time.Duration
	BatchSize      int
	StreamsPerPass int
	// PublishTimeout bounds one relay pass, publishing included.
	PublishTimeout time.Duration
	// Workers is how many bookings the in-process consumers (or one Kafka
	// consumer) work on at once.
	Workers int
	// ConsumerTimeout bounds one consumer's work on one batch; zero means
	// DefaultConsumerTimeout (see Dispatcher).
	ConsumerTimeout time.Duration
	// RetryInterval is how often parked events are looked at; their
	// backoff starts at RetryBase and doubles up to RetryMax.
	RetryInterval, RetryBase, RetryMax time.Duration
	// Retention is how long published outbox events and processed-event
	// records are kept; RetentionInterval how often they are pruned.
	Retention, RetentionInterval time.Duration
	// KafkaOpts are extra franz-go options for every client (tests).
	KafkaOpts []kgo.Opt
}

func (s *Settings) defaults() {
	if s.KafkaGroupPrefix == "" {
		s.KafkaGroupPrefix = "berth-"
	}
	if s.Relays <= 0 {
		s.Relays = 1
	}
	if s.PublishTimeout <= 0 {
		s.PublishTimeout = 30 * time.Second
	}
	if s.Workers <= 0 {
		s.Workers = 8
	}
	if s.RetryInterval <= 0 {
		s.RetryInterval = time.Second
	}
	if s.RetentionInterval <= 0 {
		s.RetentionInterval = time.Hour
	}
}

// Worker is the event machinery of one process: relays, the consumers
// (fed in-process or by Kafka consumer groups), the retrier of parked
// events, the backlog monitor and retention.
type Worker struct {
	s        Settings
	pool     *pgxpool.Pool
	clock    clock.Clock
	log      *slog.Logger
	om       *outbox.Metrics
	D        *Dispatcher
	Relays   []*outbox.Relay
	runners  []*KafkaRunner
	retrier  *Retrier
	producer *outbox.Kafka
	wake     []chan struct{}
}

// NewWorker wires the event machinery for consumers (whose names must be
// unique) on b's clock and logger, and registers its metrics with
// b.Registry.
func NewWorker(b base.Archetype, pool *pgxpool.Pool, s Settings, consumers []Consumer) (*Worker, error) {
	c, log, reg := b.Clock, b.Log, b.Registry
	s.defaults()
	seen := map[string]bool{}
	for _, cons := range consumers {
		if seen[cons.Name()] {
			return nil, fmt.Errorf("two event consumers are named %q", cons.Name())
		}
		seen[cons.Name()] = true
	}
	if s.Retention <= 0 {
		return nil, fmt.Errorf("events: retention %s: published events would be pruned at once", s.Retention)
	}
	w := &Worker{s: s, pool: pool, clock: c, log: log, om: outbox.NewMetrics(reg)}
	w.D = &Dispatcher{DB: pool, Clock: c, Log: log, Metrics: NewMetrics(reg), Attempts: 3, Workers: s.Workers, ConsumerTimeout: s.ConsumerTimeout}
	w.retrier = &Retrier{D: w.D, Consumers: consumers, Interval: s.RetryInterval, BaseBackoff: s.RetryBase, MaxBackoff: s.RetryMax}
	var pub outbox.Publisher = InProcess{D: w.D, Consumers: consumers}
	if len(s.KafkaBrokers) > 0 {
		k, err := outbox.NewKafka(s.KafkaBrokers, s.KafkaTopic, s.PublishTimeout, s.KafkaOpts...)
		if err != nil {
			return nil, err
		}
		w.producer, pub = k, k
		for _, cons := range consumers {
			w.runners = append(w.runners, &KafkaRunner{Brokers: s.KafkaBrokers, Topic: s.KafkaTopic,
				Group: s.KafkaGroupPrefix + cons.Name(), Consumer: cons, D: w.D, Extra: s.KafkaOpts})
		}
	}
	for range s.Relays {
		wake := make(chan struct{}, 1)
		w.wake = append(w.wake, wake)
		w.Relays = append(w.Relays, &outbox.Relay{DB: pool, Pub: pub, Clock: c, Log: log, Metrics: w.om, Wake: wake,
			PollInterval: s.PollInterval, StreamsPerPass: s.StreamsPerPass, BatchSize: s.BatchSize, PassTimeout: s.PublishTimeout})
	}
	return w, nil
}

// Run runs everything until ctx ends, then waits for it all to stop and
// closes the Kafka producer.
func (w *Worker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	notify := w.Wake
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.ConnectConfig(ctx, w.pool.Config().ConnConfig)
	}
	wg.Go(func() { outbox.Listen(ctx, connect, notify, w.log) })
	for _, r := range w.Relays {
		wg.Go(func() { r.Run(ctx) })
	}
	for _, r := range w.runners {
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				w.log.Error("kafka consumer stopped", "group", r.Group, "err", err)
			}
		})
	}
	wg.Go(func() { w.retrier.Run(ctx) })
	wg.Go(func() {
		w.om.Monitor(ctx, w.pool, w.clock, 5*time.Second, func(err error) { w.log.Warn("outbox backlog", "err", err) })
	})
	wg.Go(func() { w.prune(ctx) })
	wg.Wait()
	if w.producer != nil {
		w.producer.Close()
	}
}

// Wake tells this process's relays that events may have committed. It
// never blocks.
func (w *Worker) Wake() {
	for _, ch := range w.wake {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Ready checks Kafka when it is used.
func (w *Worker) Ready(ctx context.Context) error {
	if w.producer == nil {
		return nil
	}
	return w.producer.Ping(ctx)
}

func (w *Worker) prune(ctx context.Context) {
	clock.Every(ctx, w.s.RetentionInterval, func() {
		if _, _, err := w.Prune(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("prune events", "err", err)
		}
	})
}

// Prune deletes published outbox events and processed-event records older
// than the retention period, in bounded batches, and returns how many of
// each it deleted.
func (w *Worker) Prune(ctx context.Context) (events, records int, err error) {
	const batch, maxRows = 1000, 200_000
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cutoff := w.clock.Now().Add(-w.s.Retention)
	events, err = outbox.DeletePublished(ctx, w.pool, cutoff, batch, maxRows)
	w.om.Deleted(events)
	if err != nil {
		return events, 0, err
	}
	records, err = DeleteProcessed(ctx, w.pool, cutoff, batch, maxRows)
	w.D.Metrics.deleted.Add(float64(records))
	return events, records, err
}

// DeleteProcessed deletes processed-event records older than cutoff, at
// most batch per statement and maxRows in all. An event redelivered after
// its record is gone would be processed again, so the retention period
// must exceed any redelivery (Kafka's own retention included).
func DeleteProcessed(ctx context.Context, db outbox.Querier, cutoff time.Time, batch, maxRows int) (int, error) {
	total, err := outbox.DeleteBatches(ctx, db, `DELETE FROM consumer_event WHERE (consumer, event_id) IN (
		SELECT consumer, event_id FROM consumer_event WHERE processed_at < $1 LIMIT $2)`, cutoff, batch, maxRows)
	if err != nil {
		return total, fmt.Errorf("delete processed-event records before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return total, nil
}
