package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
)

// Selective is what a consumer implements when it acts on some events
// only. Events it does not want are neither handled nor recorded.
type Selective interface {
	Wants(e Event) bool
}

// Dispatcher hands events to consumers, exactly once per consumer and
// event in effect, and in order per booking:
//
//   - an event the consumer already processed (its consumer_event row
//     exists) is skipped: redelivery has no effect;
//   - otherwise the consumer handles it in a transaction that also inserts
//     that row, so the effect and the record commit together;
//   - an event the consumer keeps failing on (Attempts tries) is parked in
//     consumer_parked and retried with backoff by a Retrier; the
//     consumer's later events of that booking are parked behind it, so they
//     still arrive in order, and other bookings' events go on.
//
// Deliver returns an error only when neither processing nor parking
// worked (the database is unreachable); the caller then delivers again
// later.
type Dispatcher struct {
	DB      DB
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *Metrics
	// Attempts is how often an event is tried at once before it is parked.
	Attempts int
	// Workers is how many (booking, consumer) sequences DeliverAll runs at
	// once.
	Workers int
}

func (d *Dispatcher) attempts() int { return max(d.Attempts, 1) }

// DB is what the dispatcher works on: a pool.
type DB interface {
	pg.Beginner
	outbox.Querier
}

// FromMessage returns the event of an outbox message, as consumers see it.
func FromMessage(m outbox.Message) Event {
	return Event{ID: m.EventID, Type: m.Type, BookingID: m.BookingID, Time: m.Time, Data: m.Payload}
}

// InProcess hands msgs to consumers in-process: it is the publisher the relay
// uses when there is no Kafka. It returns once every consumer has
// processed or parked every message, which is when the relay may mark them
// published.
type InProcess struct {
	D         *Dispatcher
	Consumers []Consumer
}

// Publish delivers msgs to every consumer.
func (p InProcess) Publish(ctx context.Context, msgs []outbox.Message) error {
	evs := make([]Event, len(msgs))
	for i, m := range msgs {
		evs[i] = FromMessage(m)
	}
	return p.D.DeliverAll(ctx, p.Consumers, evs)
}

// DeliverAll delivers evs to every consumer, the consumers concurrently
// (up to Workers at once). Each consumer takes the whole batch in one
// transaction (deliverBatch), so one commit serves many events; when an
// event fails there, the batch goes one by one through Deliver instead, in
// order, with its retries and parking.
func (d *Dispatcher) DeliverAll(ctx context.Context, consumers []Consumer, evs []Event) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(d.Workers, 1))
	for _, c := range consumers {
		g.Go(func() error { return d.deliverBatch(gctx, c, evs) })
	}
	return g.Wait()
}

// deliverBatch hands c the events of evs it wants in one transaction:
//
//   - events of bookings that have an event parked for c are parked behind
//     it, as Deliver would;
//   - the rest are claimed at once by inserting their processed-event rows
//     (an insert waits for another dispatcher's claim of the same event to
//     commit, then skips it: a duplicate), and handled in order.
//
// Handling failures are rare, so the batch does not pay for a savepoint per
// event: when one fails, the whole transaction rolls back and every event
// of the batch goes through Deliver, one by one and in order, with its
// retries and parking. An effect outside the database may then happen
// twice, which it must bear anyway (at least once).
func (d *Dispatcher) deliverBatch(ctx context.Context, c Consumer, evs []Event) error {
	var wanted []Event
	for _, e := range evs {
		if s, ok := c.(Selective); !ok || s.Wants(e) {
			wanted = append(wanted, e)
		}
	}
	if len(wanted) == 0 {
		return nil
	}
	if len(wanted) == 1 {
		return d.Deliver(ctx, c, wanted[0])
	}
	var counts [parked + 1][]Event
	err := pg.InTx(ctx, d.DB, func(tx pgx.Tx) error {
		counts = [parked + 1][]Event{}
		now := d.Clock.Now()
		blocked, err := parkedBookings(ctx, tx, c.Name(), wanted)
		if err != nil {
			return err
		}
		var ids []string
		for _, e := range wanted {
			if !blocked[e.BookingID] {
				ids = append(ids, e.ID)
			}
		}
		claimed, err := claim(ctx, tx, c.Name(), ids, now)
		if err != nil {
			return err
		}
		for _, e := range wanted {
			switch {
			case blocked[e.BookingID]:
				if _, err := park(ctx, tx, c.Name(), e, now, 0, now, ""); err != nil {
					return err
				}
				counts[parked] = append(counts[parked], e)
			case !claimed[e.ID]:
				counts[duplicate] = append(counts[duplicate], e)
			default:
				if err := handle(ctx, c, tx, e); err != nil {
					d.failed(c, e, err)
					return err
				}
				counts[processed] = append(counts[processed], e)
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		d.Metrics.fallbacks.WithLabelValues(c.Name()).Inc()
		d.Log.Warn("batch delivery failed; delivering one by one", "consumer", c.Name(), "events", len(wanted), "err", err)
		for _, e := range wanted {
			if err := d.Deliver(ctx, c, e); err != nil {
				return err
			}
		}
		return nil
	}
	for out, es := range counts {
		for _, e := range es {
			d.count(c, e, outcome(out))
		}
	}
	return nil
}

// parkedBookings returns which bookings of evs have an event parked for
// consumer.
func parkedBookings(ctx context.Context, tx pgx.Tx, consumer string, evs []Event) (map[int64]bool, error) {
	ids := make([]int64, len(evs))
	for i, e := range evs {
		ids[i] = e.BookingID
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT booking_id FROM consumer_parked WHERE consumer = $1 AND booking_id = ANY($2)`,
		consumer, ids)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: look up parked bookings: %w", consumer, err)
	}
	out := map[int64]bool{}
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error { out[id] = true; return nil })
	if err != nil {
		return nil, fmt.Errorf("consumer %s: look up parked bookings: %w", consumer, err)
	}
	return out, nil
}

// claim inserts the processed-event rows of ids for consumer and returns
// the ones it inserted (not processed before).
func claim(ctx context.Context, tx pgx.Tx, consumer string, ids []string, now time.Time) (map[string]bool, error) {
	out := map[string]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, `INSERT INTO consumer_event (consumer, event_id, processed_at)
		SELECT $1, id, $3 FROM unnest($2::uuid[]) AS id
		ON CONFLICT DO NOTHING RETURNING event_id::text`, consumer, ids, now)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: claim %d events: %w", consumer, len(ids), err)
	}
	var id string
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error { out[id] = true; return nil })
	if err != nil {
		return nil, fmt.Errorf("consumer %s: claim %d events: %w", consumer, len(ids), err)
	}
	return out, nil
}

type outcome int

const (
	processed outcome = iota
	duplicate
	parked
)

// Deliver hands e to c: processed, skipped as a duplicate, or parked.
func (d *Dispatcher) Deliver(ctx context.Context, c Consumer, e Event) error {
	if s, ok := c.(Selective); ok && !s.Wants(e) {
		return nil
	}
	var err error
	for attempt := 1; attempt <= d.attempts(); attempt++ {
		if attempt > 1 {
			select {
			case <-ctx.Done():
				return errors.Join(err, ctx.Err())
			case <-time.After(time.Duration(attempt*attempt) * 10 * time.Millisecond):
			}
		}
		var out outcome
		out, err = d.try(ctx, c, e)
		if err == nil {
			d.count(c, e, out)
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		d.failed(c, e, err)
	}
	now := d.Clock.Now()
	perr := pg.InTx(ctx, d.DB, func(tx pgx.Tx) error {
		_, err := park(ctx, tx, c.Name(), e, now, d.attempts(), now.Add(retryBackoff(d.attempts(), time.Second, time.Minute)), err.Error())
		return err
	})
	if perr != nil {
		return fmt.Errorf("consumer %s failed on event %s (%w) and it could not be parked: %w", c.Name(), e.ID, err, perr)
	}
	d.Metrics.parkedNew.WithLabelValues(c.Name()).Inc()
	d.Log.Warn("event parked for retry", "consumer", c.Name(), "event", e.ID, "type", e.Type, "booking", e.BookingID, "err", err)
	return nil
}

func (d *Dispatcher) count(c Consumer, e Event, out outcome) {
	switch out {
	case processed:
		d.Metrics.processed.WithLabelValues(c.Name()).Inc()
		d.Metrics.lag.WithLabelValues(c.Name()).Observe(max(d.Clock.Now().Sub(e.Time).Seconds(), 0))
	case duplicate:
		d.Metrics.duplicates.WithLabelValues(c.Name()).Inc()
	case parked:
		d.Metrics.parkedNew.WithLabelValues(c.Name()).Inc()
	}
}

func (d *Dispatcher) failed(c Consumer, e Event, err error) {
	d.Metrics.failures.WithLabelValues(c.Name()).Inc()
	d.Log.Info("consumer failed on event", "consumer", c.Name(), "event", e.ID, "type", e.Type, "booking", e.BookingID, "err", err)
}

// try processes e in one transaction, or parks it behind an earlier parked
// event of the same booking.
func (d *Dispatcher) try(ctx context.Context, c Consumer, e Event) (outcome, error) {
	var out outcome
	err := pg.InTx(ctx, d.DB, func(tx pgx.Tx) error {
		var done, blocked bool
		err := tx.QueryRow(ctx, `SELECT
				EXISTS (SELECT 1 FROM consumer_event WHERE consumer = $1 AND event_id = $2),
				EXISTS (SELECT 1 FROM consumer_parked WHERE consumer = $1 AND booking_id = $3)`,
			c.Name(), e.ID, e.BookingID).Scan(&done, &blocked)
		if err != nil {
			return fmt.Errorf("consumer %s: look up event %s: %w", c.Name(), e.ID, err)
		}
		switch {
		case done:
			out = duplicate
			return nil
		case blocked:
			out = parked
			now := d.Clock.Now()
			_, err := park(ctx, tx, c.Name(), e, now, 0, now, "")
			return err
		}
		out = processed
		fresh, err := record(ctx, tx, c.Name(), e.ID, d.Clock.Now())
		if err != nil {
			return err
		}
		if !fresh {
			out = duplicate
			return nil
		}
		return handle(ctx, c, tx, e)
	})
	return out, err
}

// record inserts the processed-event row of consumer and event id and
// reports whether it is new.
func record(ctx context.Context, tx pgx.Tx, consumer, eventID string, now time.Time) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO consumer_event (consumer, event_id, processed_at) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`, consumer, eventID, now)
	if err != nil {
		return false, fmt.Errorf("consumer %s: record event %s: %w", consumer, eventID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// handle runs the consumer, turning a panic into an error so that one bad
// event cannot take the process down.
func handle(ctx context.Context, c Consumer, tx pgx.Tx, e Event) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("consumer %s panicked on event %s: %v", c.Name(), e.ID, p)
		}
	}()
	if err := c.Handle(ctx, tx, e); err != nil {
		return fmt.Errorf("consumer %s on %s event %s of booking %d: %w", c.Name(), e.Type, e.ID, e.BookingID, err)
	}
	return nil
}

// park sets e aside for consumer, to be tried at next. It reports false
// when e was parked already.
func park(ctx context.Context, tx pgx.Tx, consumer string, e Event, now time.Time, attempts int, next time.Time, why string) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO consumer_parked
			(consumer, event_id, booking_id, type, event_time, data, attempts, next_attempt, last_error, parked_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (consumer, event_id) DO NOTHING`,
		consumer, e.ID, e.BookingID, e.Type, e.Time, e.Data, attempts, next, truncate(why, 2000), now)
	if err != nil {
		return false, fmt.Errorf("park event %s for %s: %w", e.ID, consumer, err)
	}
	return tag.RowsAffected() == 1, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
