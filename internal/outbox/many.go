package outbox

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// WriteMany inserts events in one statement, in order, within tx: what a
// batch of holds writes at once. The same rules as Write apply.
func WriteMany(ctx context.Context, tx pgx.Tx, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	sql, args, err := InsertMany(events)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("write %d events: %w", len(events), err)
	}
	return nil
}

// InsertMany returns the statement of WriteMany, for a caller that sends
// it in a pipeline (pgx.Batch) with others of the same transaction.
func InsertMany(events []Event) (string, []any, error) {
	ids := make([]int64, len(events))
	types := make([]string, len(events))
	payloads := make([]string, len(events))
	times := make([]any, len(events))
	for i, e := range events {
		b, err := json.Marshal(e.Data)
		if err != nil {
			return "", nil, fmt.Errorf("marshal %s event of booking %d: %w", e.Type, e.BookingID, err)
		}
		ids[i], types[i], payloads[i], times[i] = e.BookingID, e.Type, string(b), e.Time
	}
	return `INSERT INTO outbox (booking_id, type, payload, created_at)
		SELECT u.booking_id, u.type, u.payload::jsonb, u.created_at
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[]) WITH ORDINALITY
			AS u(booking_id, type, payload, created_at, ord)
		ORDER BY u.ord`, []any{ids, types, payloads, times}, nil
}
