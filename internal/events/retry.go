package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
)

// Retrier retries parked events with backoff. For each consumer and
// booking it takes only the oldest parked event (the head), so a booking's
// events still reach the consumer in order; several retriers may run, and
// SKIP LOCKED gives each a different head.
type Retrier struct {
	D         *Dispatcher
	Consumers []Consumer
	// Interval is how often it looks for due events.
	Interval time.Duration
	// MaxPerPass bounds one pass.
	MaxPerPass int
	// BaseBackoff doubles with every failed attempt, up to MaxBackoff.
	BaseBackoff, MaxBackoff time.Duration
}

// Run retries due events every Interval until ctx ends.
func (r *Retrier) Run(ctx context.Context) {
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.D.Log.Error("retry parked events", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass retries due events until none is due or MaxPerPass were tried, then
// refreshes the parked-events gauge. It returns how many it tried.
func (r *Retrier) Pass(ctx context.Context) (int, error) {
	byName := make(map[string]Consumer, len(r.Consumers))
	names := make([]string, 0, len(r.Consumers))
	for _, c := range r.Consumers {
		byName[c.Name()] = c
		names = append(names, c.Name())
	}
	limit := r.MaxPerPass
	if limit <= 0 {
		limit = 1000
	}
	n := 0
	for ; n < limit; n++ {
		found, err := r.retryOne(ctx, byName, names)
		if err != nil {
			return n, err
		}
		if !found {
			break
		}
	}
	return n, r.gauge(ctx, names)
}

func (r *Retrier) retryOne(ctx context.Context, byName map[string]Consumer, names []string) (bool, error) {
	found := false
	d := r.D
	err := pg.InTx(ctx, d.DB, func(tx pgx.Tx) error {
		now := d.Clock.Now()
		var (
			seq      int64
			name     string
			attempts int
			e        Event
		)
		err := tx.QueryRow(ctx, `SELECT seq, consumer, event_id::text, booking_id, type, event_time, data, attempts
			FROM consumer_parked p
			WHERE consumer = ANY($2) AND next_attempt <= $1
			  AND NOT EXISTS (SELECT 1 FROM consumer_parked q
			                  WHERE q.consumer = p.consumer AND q.booking_id = p.booking_id AND q.seq < p.seq)
			ORDER BY next_attempt, seq LIMIT 1
			FOR UPDATE SKIP LOCKED`, now, names).
			Scan(&seq, &name, &e.ID, &e.BookingID, &e.Type, &e.Time, &e.Data, &attempts)
		if errors.Is(err, pgx.ErrNoRows) {
			found = false
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim a parked event: %w", err)
		}
		found = true
		c := byName[name]
		var out outcome
		over, herr := d.within(ctx, tx.Conn().PgConn(), func(cctx context.Context) error {
			var err error
			out, err = retryIn(cctx, tx, c, e, now)
			return err
		})
		if herr != nil {
			if over {
				d.Metrics.timeouts.WithLabelValues(c.Name()).Inc()
				herr = fmt.Errorf("consumer %s took longer than %s: %w", c.Name(), d.consumerTimeout(), herr)
			}
			attempts++
			d.failed(c, e, herr)
			next := now.Add(retryBackoff(attempts, r.BaseBackoff, r.MaxBackoff))
			_, err := tx.Exec(ctx, `UPDATE consumer_parked SET attempts = $2, next_attempt = $3, last_error = $4 WHERE seq = $1`,
				seq, attempts, next, truncate(herr.Error(), 2000))
			if err != nil {
				return fmt.Errorf("reschedule parked event %s: %w", e.ID, err)
			}
			return nil
		}
		if _, err := tx.Exec(ctx, `DELETE FROM consumer_parked WHERE seq = $1`, seq); err != nil {
			return fmt.Errorf("unpark event %s: %w", e.ID, err)
		}
		d.count(c, e, out)
		return nil
	})
	return found, err
}

// retryIn processes e within a savepoint of tx (within the consumer's
// time, like a relay batch), so that a failure undoes
// only the consumer's work and the attempt can still be recorded.
func retryIn(ctx context.Context, tx pgx.Tx, c Consumer, e Event, now time.Time) (outcome, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return processed, fmt.Errorf("savepoint: %w", err)
	}
	fresh, err := record(ctx, sp, c.Name(), e.ID, now)
	if err == nil && fresh {
		err = handle(ctx, c, sp, e)
	}
	if err != nil {
		// ctx may be over (the consumer ran out of time); the rollback
		// must still happen for the attempt to be recorded.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = sp.Rollback(rctx)
		return processed, err
	}
	if err := sp.Commit(ctx); err != nil {
		return processed, fmt.Errorf("release savepoint: %w", err)
	}
	if !fresh {
		return duplicate, nil
	}
	return processed, nil
}

func (r *Retrier) gauge(ctx context.Context, names []string) error {
	rows, err := r.D.DB.Query(ctx, `SELECT consumer, count(*) FROM consumer_parked WHERE consumer = ANY($1) GROUP BY consumer`, names)
	if err != nil {
		return fmt.Errorf("count parked events: %w", err)
	}
	counts := map[string]int64{}
	var name string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		counts[name] = n
		return nil
	})
	if err != nil {
		return fmt.Errorf("count parked events: %w", err)
	}
	for _, nm := range names {
		r.D.Metrics.parked.WithLabelValues(nm).Set(float64(counts[nm]))
	}
	return nil
}

// retryBackoff is outbox.Backoff with defaults for a zero base (1 s) and
// maxWait (5 min).
func retryBackoff(attempts int, base, maxWait time.Duration) time.Duration {
	if base <= 0 {
		base = time.Second
	}
	if maxWait <= 0 {
		maxWait = 5 * time.Minute
	}
	return outbox.Backoff(attempts, base, maxWait)
}
