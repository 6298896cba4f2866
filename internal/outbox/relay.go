package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/pg"
)

// Publisher hands a batch of events on: to Kafka, or to the in-process
// consumers. It returns nil only when every message has been taken (acked
// by the brokers, or processed or parked by every consumer), in the
// order given for each booking. On an error the relay publishes the whole
// batch again later, so a publisher may see a message more than once.
type Publisher interface {
	Publish(ctx context.Context, msgs []Message) error
}

// TxPublisher is a Publisher that can take a batch inside the relay's
// transaction: the in-process consumers record their effects and their
// processed marks in it, so that claiming, publishing and marking a batch,
// and every consumer's work on it, commit together — one commit (one WAL
// flush) per batch instead of one per consumer and one for the relay. It
// returns a function to run once that transaction has committed (metrics),
// or nil.
type TxPublisher interface {
	PublishTx(ctx context.Context, tx pgx.Tx, msgs []Message) (committed func(), err error)
}

// Querier runs statements: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Channel is the LISTEN/NOTIFY channel that a trigger on the outbox
// notifies when events commit.
const Channel = "berth_outbox"

// Relay publishes outbox events. Several relays may run, in one process or
// many: a pass locks some of the outbox's streams (FOR UPDATE SKIP LOCKED on
// outbox_stream, so relays share the streams and never wait for each other),
// publishes the oldest unpublished events of those streams in id order, marks
// them published and commits, which releases the streams. A booking's events
// all go to one stream, so they are published by one relay at a time and in
// the order written; the next relay to take the stream starts after the
// previous one's marks committed.
//
// If the process dies between publishing and marking, the transaction rolls
// back and the events are published again: delivery is at least once, and
// consumers deduplicate by event id.
type Relay struct {
	DB      pg.Beginner
	Pub     Publisher
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *Metrics
	// Wake, when not nil, signals that events may have committed (the
	// LISTEN/NOTIFY listener); the relay also polls every PollInterval.
	Wake <-chan struct{}
	// PollInterval is required (BERTH_OUTBOX_POLL_INTERVAL).
	PollInterval time.Duration
	// Gather is how long the relay waits after a wake-up before its pass,
	// so that the events of commits landing together go in one pass (and
	// so in one consumer transaction) instead of one pass each. Its
	// default, 50 ms, keeps the delay from commit to consumers under about
	// a tenth of a second, makes one pass of many holds of one busy client
	// (about 1.1 commits per hold, where 5 ms made 1.35), and bounds the
	// passes of a busy process to about 20 a second.
	Gather time.Duration
	// StreamsPerPass and BatchSize bound one pass; PassTimeout bounds its
	// time, publishing included.
	StreamsPerPass int
	BatchSize      int
	PassTimeout    time.Duration
	// MaxBackoff caps the wait after a failed pass.
	MaxBackoff time.Duration

	// AfterPublish, when set, runs between publishing and committing the
	// published marks; an error from it rolls the pass back as a crash
	// there would. It is a fault-injection point for tests; production leaves it
	// nil.
	AfterPublish func(ctx context.Context, msgs []Message) error

	// full is whether the last pass took as many streams or events as it
	// could, so that more may be waiting.
	full bool
}

// Defaults for the zero values of a Relay's settings.
const (
	DefaultStreamsPerPass = 64
	DefaultBatchSize      = 500
	DefaultGather         = 50 * time.Millisecond
)

func (r *Relay) defaults() {
	if r.StreamsPerPass <= 0 {
		r.StreamsPerPass = DefaultStreamsPerPass
	}
	if r.BatchSize <= 0 {
		r.BatchSize = DefaultBatchSize
	}
	if r.Gather < 0 {
		r.Gather = 0
	} else if r.Gather == 0 {
		r.Gather = DefaultGather
	}
	if r.PassTimeout <= 0 {
		r.PassTimeout = 30 * time.Second
	}
	if r.MaxBackoff <= 0 {
		r.MaxBackoff = 10 * time.Second
	}
	if r.Log == nil {
		r.Log = slog.New(slog.DiscardHandler)
	}
}

// Run relays events until ctx ends: passes back to back while there is
// work, then waits for a notification or the poll interval. After a failed
// pass (broker down, database unreachable) it backs off exponentially.
func (r *Relay) Run(ctx context.Context) {
	r.defaults()
	if r.PollInterval <= 0 {
		// Its default is BERTH_OUTBOX_POLL_INTERVAL's (internal/config).
		panic("outbox: Relay.PollInterval is required")
	}
	poll := time.NewTicker(r.PollInterval)
	defer poll.Stop()
	failures := 0
	if !r.pending(ctx) && !r.wait(ctx, poll.C) {
		return
	}
	for ctx.Err() == nil {
		_, err := r.Pass(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			wait := Backoff(failures, 50*time.Millisecond, r.MaxBackoff)
			r.Log.Warn("relay outbox events", "err", err, "retry_in", wait.String())
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		failures = 0
		if r.full {
			continue // a full pass: there may be more, drain before waiting
		}
		// Anything that committed after this pass's claim has notified the
		// channel, so the pass just made was the last with work until then:
		// passing again at once would be a transaction that finds nothing.
		if !r.wait(ctx, poll.C) {
			return
		}
	}
}

// wait returns when a pass may find work: after a wake-up and the gather
// time, or at a poll that finds unpublished events. It returns false when
// ctx ends.
func (r *Relay) wait(ctx context.Context, poll <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-r.Wake:
			select {
			case <-ctx.Done():
				return false
			case <-time.After(r.Gather):
			}
			// What notified meanwhile has committed, so the pass about to
			// claim sees it: a wake-up left for it would only make an empty
			// pass after this one.
			select {
			case <-r.Wake:
			default:
			}
			return true
		case <-poll:
			// A poll is for what a lost notification missed, which is
			// rare: look without a transaction first.
			if r.pending(ctx) {
				return true
			}
		}
	}
}

// pending reports whether the outbox has unpublished events, with one
// read-only statement and no transaction. It says true when it cannot
// tell.
func (r *Relay) pending(ctx context.Context) bool {
	q, ok := r.DB.(interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	})
	if !ok {
		return true
	}
	var any bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox WHERE published_at IS NULL)`).Scan(&any); err != nil {
		return true
	}
	return any
}

// Backoff is the wait after the nth failure in a row: base·2^(n-1),
// capped at maxWait, less up to 25% jitter so that what failed together
// does not retry together.
func Backoff(n int, base, maxWait time.Duration) time.Duration {
	d := maxWait
	if n < 30 {
		d = min(base<<max(n-1, 0), maxWait)
	}
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

// Pass publishes one batch: the oldest unpublished events of up to
// StreamsPerPass streams that no other relay holds, at most BatchSize of them.
// It returns how many it published.
func (r *Relay) Pass(ctx context.Context) (int, error) {
	r.defaults()
	msgs, err := r.pass(ctx)
	if r.Metrics != nil {
		switch {
		case err != nil && ctx.Err() != nil:
			// Cut short by shutdown: not a failure to publish.
		case err != nil:
			r.Metrics.publishErrors.Inc()
		case len(msgs) > 0:
			r.Metrics.passes.Inc()
			r.Metrics.published.Add(float64(len(msgs)))
		}
	}
	if err != nil {
		return 0, err
	}
	return len(msgs), nil
}

func (r *Relay) pass(ctx context.Context) ([]Message, error) {
	passCtx, cancel := context.WithTimeout(ctx, r.PassTimeout)
	defer cancel()
	tx, err := r.DB.Begin(passCtx)
	if err != nil {
		return nil, fmt.Errorf("relay: begin: %w", err)
	}
	defer func() {
		rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rbCtx)
	}()
	now := r.Clock.Now()
	msgs, streams, err := claim(passCtx, tx, r.StreamsPerPass, r.BatchSize, now)
	r.full = err == nil && (len(msgs) >= r.BatchSize || streams >= r.StreamsPerPass)
	if err != nil || len(msgs) == 0 {
		return nil, err
	}
	start := time.Now()
	var committed func()
	if tp, ok := r.Pub.(TxPublisher); ok {
		committed, err = tp.PublishTx(passCtx, tx, msgs)
	} else {
		err = r.Pub.Publish(passCtx, msgs)
	}
	if err != nil {
		return nil, fmt.Errorf("publish %d events: %w", len(msgs), err)
	}
	publishTime := time.Since(start)
	if r.AfterPublish != nil {
		if err := r.AfterPublish(passCtx, msgs); err != nil {
			return nil, err
		}
	}
	// Once the events are out, committing their marks must not fail for
	// want of time: that would only publish them again.
	commitCtx, cancelCommit := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancelCommit()
	if err := tx.Commit(commitCtx); err != nil {
		return nil, fmt.Errorf("mark %d events published: commit: %w", len(msgs), err)
	}
	if committed != nil {
		committed()
	}
	if r.Metrics != nil {
		r.Metrics.publishTime.Observe(publishTime.Seconds())
		published := r.Clock.Now()
		for _, m := range msgs {
			r.Metrics.delay.Observe(max(published.Sub(m.Time).Seconds(), 0))
		}
	}
	return msgs, nil
}

// claim locks up to streams streams that have unpublished events, oldest first,
// skipping streams other relays hold, and marks up to limit of their
// unpublished events published at now, returning them in id order. The
// events themselves are locked without SKIP LOCKED: the stream lock already
// makes this relay their only publisher, and skipping a row here could
// publish a booking's later event before an earlier one.
//
// Claiming and marking are one statement, the first of the pass's
// transaction, sent in one round trip with the setting below: the marks
// commit only with the pass, after the events were published (a pass that
// fails rolls them back, and the events are published again), and each
// event row is visited and written once (a lock, then an update, wrote it
// twice). The statement reads the outbox on a snapshot taken before it
// locked the streams, so it may see as unpublished an event another relay
// published and committed meanwhile: the update then re-checks the row as
// committed (published_at IS NULL no longer holds) and leaves it out. What it does not see committed later, and wakes the
// relays itself; a booking's events commit in id order, so a later one is
// never seen without the earlier.
//
// The pass's commit does not wait for its WAL flush (synchronous_commit
// off, set in the claim's round trip): everything the pass writes — the
// published marks and, in process, the consumers' effects and processed
// marks with them — is lost together or kept together, and a pass lost in
// a crash is only published again, which consumers deduplicate
// (docs/events.md). The changes that wrote the events commit durably, and
// any durable commit after the pass flushes it too.
func claim(ctx context.Context, tx pgx.Tx, streams, limit int, now time.Time) (msgs []Message, held int, err error) {
	b := &pgx.Batch{}
	b.Queue(`SET LOCAL synchronous_commit = off`)
	b.Queue(claimSQL, streams, limit, now)
	br := tx.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			msgs, held, err = nil, 0, fmt.Errorf("claim outbox events: %w", cerr)
		}
	}()
	if _, err := br.Exec(); err != nil {
		return nil, 0, fmt.Errorf("claim outbox events: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, 0, fmt.Errorf("claim outbox events: %w", err)
	}
	msgs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Message, error) {
		var m Message
		err := row.Scan(&m.Seq, &m.EventID, &m.BookingID, &m.Type, &m.Payload, &m.Time, &held)
		return m, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("claim outbox events: %w", err)
	}
	slices.SortFunc(msgs, func(a, b Message) int { return cmp.Compare(a.Seq, b.Seq) })
	return msgs, held, nil
}

// claimSQL locks up to $1 streams with unpublished events (oldest first,
// skipping locked ones), marks up to $2 of their unpublished events
// published at $3 and returns them with the number of streams it locked.
const claimSQL = `WITH held AS (
		SELECT s.stream FROM outbox_stream s
		CROSS JOIN LATERAL (SELECT o.id FROM outbox o WHERE o.stream = s.stream AND o.published_at IS NULL
		                    ORDER BY o.id LIMIT 1) head
		ORDER BY head.id LIMIT $1
		FOR UPDATE OF s SKIP LOCKED),
	ev AS (
		SELECT o.id FROM outbox o
		WHERE o.stream IN (SELECT stream FROM held) AND o.published_at IS NULL
		ORDER BY o.id LIMIT $2)
	UPDATE outbox o SET published_at = $3 FROM ev WHERE o.id = ev.id AND o.published_at IS NULL
	RETURNING o.id, o.event_id::text, o.booking_id, o.type, o.payload, o.created_at, (SELECT count(*)::int FROM held)`

// Listen holds a connection LISTENing on Channel and calls notify on every
// notification, and once after each (re)connection, since
// events may have committed while it was away. It reconnects with backoff
// until ctx ends. connect opens a dedicated connection (not one from a pool:
// it stays busy waiting).
// notify must not block.
func Listen(ctx context.Context, connect func(context.Context) (*pgx.Conn, error), notify func(), log *slog.Logger) {
	signal := notify
	failures := 0
	for ctx.Err() == nil {
		err := listenOnce(ctx, connect, signal)
		if ctx.Err() != nil {
			return
		}
		failures++
		wait := Backoff(failures, 100*time.Millisecond, 10*time.Second)
		log.Warn("outbox listener lost its connection; polling meanwhile", "err", err, "retry_in", wait.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func listenOnce(ctx context.Context, connect func(context.Context) (*pgx.Conn, error), signal func()) error {
	conn, err := connect(ctx)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return fmt.Errorf("listen %s: %w", Channel, err)
	}
	signal()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if errors.Is(err, context.Canceled) {
				return err
			}
			return fmt.Errorf("wait for notification: %w", err)
		}
		signal()
	}
}
