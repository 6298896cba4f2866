package outbox

import (
	"context"
	"fmt"
	"time"

	"berth.dev/berth/internal/clock"
)

// DeletePublished deletes events published before cutoff, at most batch
// per statement and maxRows in all, and returns how many it deleted.
// Unpublished events are never deleted.
func DeletePublished(ctx context.Context, db Querier, cutoff time.Time, batch, maxRows int) (int, error) {
	total, err := DeleteBatches(ctx, db, `DELETE FROM outbox WHERE id IN (
		SELECT id FROM outbox WHERE published_at < $1 ORDER BY id LIMIT $2)`, cutoff, batch, maxRows)
	if err != nil {
		return total, fmt.Errorf("delete events published before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return total, nil
}

// DeleteBatches runs del, a DELETE of at most $2 rows older than $1
// (cutoff), again and again until one deletes fewer than batch rows or
// maxRows are deleted in all, and returns how many it deleted.
func DeleteBatches(ctx context.Context, db Querier, del string, cutoff time.Time, batch, maxRows int) (int, error) {
	total := 0
	for total < maxRows {
		tag, err := db.Exec(ctx, del, cutoff, min(batch, maxRows-total))
		if err != nil {
			return total, err
		}
		n := int(tag.RowsAffected())
		total += n
		if n < batch {
			break
		}
	}
	return total, nil
}

// Deleted counts n events deleted by retention.
func (m *Metrics) Deleted(n int) { m.deleted.Add(float64(n)) }

// Monitor reads the backlog every interval into the gauges until ctx ends.
func (m *Metrics) Monitor(ctx context.Context, db Querier, c clock.Clock, interval time.Duration, onErr func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		readCtx, cancel := context.WithTimeout(ctx, interval)
		b, err := ReadBacklog(readCtx, db)
		cancel()
		switch {
		case err == nil:
			m.observeBacklog(b, c.Now())
		case ctx.Err() == nil:
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
