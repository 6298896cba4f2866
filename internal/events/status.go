package events

import (
	"context"
	"fmt"
	"time"

	"berth.dev/berth/internal/outbox"
)

// Status is how far behind the event machinery is, as an operator watches
// it: the outbox's unpublished backlog and, per consumer, the events it
// keeps failing on.
type Status struct {
	// Backlog is how many events wait to be published; OldestAge how long
	// the oldest has waited (0 when none).
	Backlog   int64         `json:"backlog"`
	OldestAge time.Duration `json:"-"`
	Consumers []ConsumerLag `json:"consumers"`
	AsOf      time.Time     `json:"asOf"`
}

// ConsumerLag is one consumer's delay. An event reaches a consumer once it
// is published (in-process at once; through Kafka after the consumer
// group reads it), unless the consumer failed on it and it is parked for a
// retry: so a consumer lags by the outbox's backlog or its oldest parked
// event, whichever is older.
type ConsumerLag struct {
	Name   string `json:"name"`
	Parked int64  `json:"parked"`
	// Lag is the age of the oldest event this consumer has not processed
	// yet, as far as the database knows (0 when none waits).
	Lag time.Duration `json:"-"`
}

// Consumers returns the names of w's consumers, in the order given.
func (w *Worker) Consumers() []string {
	out := make([]string, 0, len(w.retrier.Consumers))
	for _, c := range w.retrier.Consumers {
		out = append(out, c.Name())
	}
	return out
}

// ReadStatus reads the backlog and the named consumers' lag at now.
func ReadStatus(ctx context.Context, db outbox.Querier, consumers []string, now time.Time) (Status, error) {
	b, err := outbox.ReadBacklog(ctx, db)
	if err != nil {
		return Status{}, err
	}
	st := Status{Backlog: b.Rows, AsOf: now, Consumers: make([]ConsumerLag, 0, len(consumers))}
	if !b.Oldest.IsZero() {
		st.OldestAge = max(now.Sub(b.Oldest), 0)
	}
	parked := map[string]ConsumerLag{}
	rows, err := db.Query(ctx, `SELECT consumer, count(*), min(event_time) FROM consumer_parked GROUP BY consumer`)
	if err != nil {
		return Status{}, fmt.Errorf("read parked events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c ConsumerLag
		var oldest time.Time
		if err := rows.Scan(&c.Name, &c.Parked, &oldest); err != nil {
			return Status{}, fmt.Errorf("read parked events: %w", err)
		}
		c.Lag = max(now.Sub(oldest), 0)
		parked[c.Name] = c
	}
	if err := rows.Err(); err != nil {
		return Status{}, fmt.Errorf("read parked events: %w", err)
	}
	for _, name := range consumers {
		c := parked[name]
		c.Name = name
		c.Lag = max(c.Lag, st.OldestAge)
		st.Consumers = append(st.Consumers, c)
	}
	return st, nil
}
