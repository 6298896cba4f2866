package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// BatchHandler is what a consumer implements when it can take the events
// of a batch in fewer statements than one event at a time. HandleBatch
// must have the effect of Handle on each event of evs in order; the
// dispatcher calls it, within the batch's transaction, with the events it
// claimed for the consumer (never a duplicate, never a parked booking's).
// An error rolls the batch back and its events go one by one through
// Handle.
type BatchHandler interface {
	HandleBatch(ctx context.Context, tx pgx.Tx, evs []Event) error
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
	// ConsumerTimeout bounds one consumer's work on one relay batch (and
	// on one parked event it retries); zero means DefaultConsumerTimeout.
	// A consumer that takes longer has the batch parked for it, to be
	// retried with backoff, and the other consumers' work goes on: one
	// slow consumer does not hold up the others.
	ConsumerTimeout time.Duration
}

// DefaultConsumerTimeout is a consumer's time for one batch when the
// Dispatcher's ConsumerTimeout is zero. The in-process consumers take a
// relay batch one after the other within the relay pass's time (30 s by
// default), so four of them at this bound still leave the pass time to
// mark the batch published.
const DefaultConsumerTimeout = 5 * time.Second

func (d *Dispatcher) attempts() int { return max(d.Attempts, 1) }

func (d *Dispatcher) consumerTimeout() time.Duration {
	if d.ConsumerTimeout > 0 {
		return d.ConsumerTimeout
	}
	return DefaultConsumerTimeout
}

// within runs f, a consumer's work on a transaction of conn, bounded by
// the consumer's time, and reports whether f ran past it. At the bound it
// first asks PostgreSQL to cancel the statement conn is running: a
// statement cut short by its context alone makes pgx close the
// connection, and the transaction with it (the relay's, which holds the
// other consumers' work). A cancelled statement only aborts the
// transaction, which a rollback to the consumer's savepoint repairs. If f
// has still not returned a grace later (it waits on something else, an
// HTTP call), its context is cancelled. Consumers must return once their
// context is done: one that does not cannot be bounded, as its
// transaction cannot be used by anyone else until it returns.
func (d *Dispatcher) within(ctx context.Context, conn *pgconn.PgConn, f func(ctx context.Context) error) (over bool, err error) {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var late atomic.Bool
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(d.consumerTimeout())
		defer t.Stop()
		select {
		case <-stop:
			return
		case <-t.C:
		}
		late.Store(true)
		if conn != nil {
			// Wait for PostgreSQL to acknowledge the cancel request: one
			// given up on too early may still be carried out later, and
			// then cancels whatever statement the relay runs next. Under
			// load, forking the cancel request's process takes a while.
			rctx, rcancel := context.WithTimeout(ctx, cancelAckWait)
			_ = conn.CancelRequest(rctx)
			rcancel()
		}
		select {
		case <-stop:
		case <-time.After(min(time.Second, d.consumerTimeout())):
			cancel()
		}
	}()
	err = f(fctx)
	close(stop)
	<-done
	return late.Load(), err
}

// cancelAckWait bounds the wait for PostgreSQL's acknowledgement of a cancel
// request sent for a consumer past its time.
const cancelAckWait = 10 * time.Second

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
// twice, which it must bear anyway (at least once). A batch whose
// connection the database refused or lost (pg.Away) is not retried one by
// one: it fails as a whole.
func (d *Dispatcher) deliverBatch(ctx context.Context, c Consumer, evs []Event) error {
	wanted := wantedBy(c, evs)
	if len(wanted) == 0 {
		return nil
	}
	if len(wanted) == 1 {
		return d.Deliver(ctx, c, wanted[0])
	}
	var counts [parked + 1][]Event
	err := pg.InTx(ctx, d.DB, func(tx pgx.Tx) error {
		var err error
		counts, err = d.deliverIn(ctx, tx, c, wanted, "")
		return err
	})
	if err != nil {
		// A database that refused or lost the connection is no event's
		// fault: the pass fails, and the relay offers the batch again
		// later, instead of knocking once more per event.
		if ctx.Err() != nil || pg.Away(err) {
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
	d.countAll(c, counts)
	return nil
}

func (d *Dispatcher) countAll(c Consumer, counts [parked + 1][]Event) {
	for out, es := range counts {
		for _, e := range es {
			d.count(c, e, outcome(out))
		}
	}
}

// wantedBy returns the events of evs that c wants, in order.
func wantedBy(c Consumer, evs []Event) []Event {
	var wanted []Event
	for _, e := range evs {
		if s, ok := c.(Selective); !ok || s.Wants(e) {
			wanted = append(wanted, e)
		}
	}
	return wanted
}

// PublishTx delivers msgs to every consumer within tx, the relay's
// transaction (outbox.TxPublisher), so that the batch's claim, every
// consumer's effects and processed marks, and the published marks commit
// together.
func (p InProcess) PublishTx(ctx context.Context, tx pgx.Tx, msgs []outbox.Message) (func(), error) {
	evs := make([]Event, len(msgs))
	for i, m := range msgs {
		evs[i] = FromMessage(m)
	}
	return p.D.DeliverAllTx(ctx, tx, p.Consumers, evs)
}

// DeliverAllTx delivers evs to every consumer within tx, one consumer after
// the other, each in a savepoint of its own: a consumer that fails on the
// batch has its part rolled back to its savepoint and takes the batch one
// event at a time through Deliver (own transactions, retries, parking),
// while the other consumers' work stays in tx. A consumer that runs out of
// its time (ConsumerTimeout) has its part rolled back and the batch parked
// for it, and the others go on. It returns what to run once tx has
// committed (the consumers' metrics). An error means tx must be rolled
// back and the batch delivered again.
func (d *Dispatcher) DeliverAllTx(ctx context.Context, tx pgx.Tx, consumers []Consumer, evs []Event) (func(), error) {
	var done [][parked + 1][]Event
	var doneBy []Consumer
	for i, c := range consumers {
		wanted := wantedBy(c, evs)
		if len(wanted) == 0 {
			continue
		}
		savepoint := fmt.Sprintf("consumer_%d", i)
		var counts [parked + 1][]Event
		over, err := d.within(ctx, tx.Conn().PgConn(), func(cctx context.Context) error {
			var err error
			counts, err = d.deliverIn(cctx, tx, c, wanted, savepoint)
			return err
		})
		if err == nil {
			done, doneBy = append(done, counts), append(doneBy, c)
			continue
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepoint); rerr != nil {
			if over {
				// The transaction is lost: park the batch for c on its
				// own, so that the pass publishing it again parks c's
				// events behind these instead of waiting for c again.
				if perr := d.parkLate(ctx, d.DB, c, wanted, err); perr != nil {
					rerr = errors.Join(rerr, perr)
				}
			}
			return nil, errors.Join(err, rerr)
		}
		if over {
			if perr := d.parkLate(ctx, tx, c, wanted, err); perr != nil {
				return nil, perr
			}
			continue
		}
		d.Metrics.fallbacks.WithLabelValues(c.Name()).Inc()
		d.Log.Warn("batch delivery failed; delivering one by one", "consumer", c.Name(), "events", len(wanted), "err", err)
		if err := d.deliverEach(ctx, c, wanted); err != nil {
			return nil, err
		}
	}
	return func() {
		for i, c := range doneBy {
			d.countAll(c, done[i])
		}
	}, nil
}

// deliverEach hands c the events wanted one by one through Deliver, within
// the consumer's time: the events it has not reached by then are parked
// for it.
func (d *Dispatcher) deliverEach(ctx context.Context, c Consumer, wanted []Event) error {
	cctx, cancel := context.WithTimeout(ctx, d.consumerTimeout())
	defer cancel()
	for j, e := range wanted {
		err := d.Deliver(cctx, c, e)
		if err == nil {
			continue
		}
		if ctx.Err() != nil || cctx.Err() == nil {
			return err
		}
		return d.parkLate(ctx, d.DB, c, wanted[j:], err)
	}
	return nil
}

// parkLate parks evs for c, in order, after c ran out of its time on them
// (cause): the Retrier tries them again after a backoff, one booking's
// events in order, while the relay goes on with the other consumers.
func (d *Dispatcher) parkLate(ctx context.Context, db pg.Beginner, c Consumer, evs []Event, cause error) error {
	now := d.Clock.Now()
	why := fmt.Sprintf("consumer %s took longer than %s: %v", c.Name(), d.consumerTimeout(), cause)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := pg.InTx(ctx, db, func(tx pgx.Tx) error {
		for _, e := range evs {
			if _, err := park(ctx, tx, c.Name(), e, now, 1, now.Add(retryBackoff(1, time.Second, time.Minute)), why); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("consumer %s ran out of time (%w) and its %d events could not be parked: %w", c.Name(), cause, len(evs), err)
	}
	for _, e := range evs {
		d.count(c, e, parked)
	}
	d.Metrics.timeouts.WithLabelValues(c.Name()).Inc()
	d.Log.Warn("consumer ran out of time; its events are parked for retry", "consumer", c.Name(), "events", len(evs),
		"bound", d.consumerTimeout(), "err", cause)
	return nil
}

// claimBatchSQL claims the events $2 (of bookings $3, in the same order)
// for consumer $1 at $4, in one statement: it inserts the processed-event
// rows of the events whose booking has no event parked for the consumer
// (an insert waits for another dispatcher's claim of the same event to
// commit, then skips it: a duplicate), and returns the events it claimed
// and the bookings with parked events.
const claimBatchSQL = `WITH blocked AS (
		SELECT DISTINCT booking_id FROM consumer_parked WHERE consumer = $1 AND booking_id = ANY($3)),
	ins AS (
		INSERT INTO consumer_event (consumer, event_id, processed_at)
		SELECT $1, e.id, $4 FROM unnest($2::uuid[], $3::bigint[]) AS e(id, booking)
		WHERE e.booking NOT IN (SELECT booking_id FROM blocked)
		ON CONFLICT DO NOTHING RETURNING event_id::text)
	SELECT true, event_id, 0::bigint FROM ins
	UNION ALL SELECT false, '', booking_id FROM blocked`

// deliverIn hands c the events wanted within tx: events of bookings that
// have an event parked for c are parked behind it, the rest claimed and
// handled in order (duplicates skipped). With a savepoint name, it opens
// that savepoint first, in the claim's round trip. It returns the events by
// outcome; on an error tx (or the savepoint) must be rolled back.
func (d *Dispatcher) deliverIn(ctx context.Context, tx pgx.Tx, c Consumer, wanted []Event, savepoint string) ([parked + 1][]Event, error) {
	var counts [parked + 1][]Event
	now := d.Clock.Now()
	ids := make([]string, len(wanted))
	bookings := make([]int64, len(wanted))
	for i, e := range wanted {
		ids[i], bookings[i] = e.ID, e.BookingID
	}
	b := &pgx.Batch{}
	if savepoint != "" {
		b.Queue("SAVEPOINT " + savepoint)
	}
	b.Queue(claimBatchSQL, c.Name(), ids, bookings, now)
	br := tx.SendBatch(ctx, b)
	claimed, blocked := map[string]bool{}, map[int64]bool{}
	err := func() error {
		if savepoint != "" {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var (
			isClaim bool
			id      string
			booking int64
		)
		_, err = pgx.ForEachRow(rows, []any{&isClaim, &id, &booking}, func() error {
			if isClaim {
				claimed[id] = true
			} else {
				blocked[booking] = true
			}
			return nil
		})
		return err
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return counts, fmt.Errorf("consumer %s: claim %d events: %w", c.Name(), len(ids), err)
	}
	bh, batched := c.(BatchHandler)
	for _, e := range wanted {
		switch {
		case blocked[e.BookingID]:
			if _, err := park(ctx, tx, c.Name(), e, now, 0, now, ""); err != nil {
				return counts, err
			}
			counts[parked] = append(counts[parked], e)
		case !claimed[e.ID]:
			counts[duplicate] = append(counts[duplicate], e)
		default:
			// A claim covers one copy: the same event twice in one batch
			// (a relay that published it again before Kafka delivered the
			// first copy) is handled once, its second copy a duplicate.
			delete(claimed, e.ID)
			if !batched {
				if err := handle(ctx, c, tx, e); err != nil {
					d.failed(c, e, err)
					return counts, err
				}
			}
			counts[processed] = append(counts[processed], e)
		}
	}
	if batched && len(counts[processed]) > 0 {
		if err := handleBatch(ctx, bh, c.Name(), tx, counts[processed]); err != nil {
			d.failed(c, counts[processed][0], err)
			return counts, err
		}
	}
	return counts, nil
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

// handleBatch runs a BatchHandler, turning a panic into an error as handle
// does.
func handleBatch(ctx context.Context, h BatchHandler, name string, tx pgx.Tx, evs []Event) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("consumer %s panicked on a batch of %d events: %v", name, len(evs), p)
		}
	}()
	if err := h.HandleBatch(ctx, tx, evs); err != nil {
		return fmt.Errorf("consumer %s on a batch of %d events: %w", name, len(evs), err)
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
