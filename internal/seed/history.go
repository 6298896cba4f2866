package seed

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/booking"
)

// completeHistory gives seeded car bookings what the running system would
// have written along with them, so that the seeded database keeps every
// invariant (berth audit): a charge and its payment, received while the
// hold stood, for every booking that was confirmed; a completed refund for
// every cancellation that owed one; and the booking events of every
// booking changed within eventRetention before now, as published (older
// ones would have been pruned by then).
func completeHistory(ctx context.Context, pool *pgxpool.Pool, carIDs []int64, now time.Time, eventRetention time.Duration) (events int, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, q := range []string{
			`INSERT INTO charge (booking_id, amount, currency, provider_txn_id, created_at)
			 SELECT id, amount, currency, 'seed-' || id, created_at + (hold_expires_at - created_at) / 3
			 FROM booking WHERE car_id = ANY($1) AND status IN ('CONFIRMED', 'ON_TRIP', 'COMPLETED', 'CANCELLED')`,
			`INSERT INTO payment (provider_txn_id, booking_id, amount, currency, outcome, received_at)
			 SELECT 'seed-' || id, id, amount, currency, 'confirmed', ` + paidAt + `
			 FROM booking WHERE car_id = ANY($1) AND status IN ('CONFIRMED', 'ON_TRIP', 'COMPLETED', 'CANCELLED')`,
			`INSERT INTO refund (event_id, payment_id, booking_id, amount, currency, reason, status, gateway_refund_id,
				created_at, completed_at)
			 SELECT 'seed-' || b.id, p.id, b.id, b.refund_amount, b.currency, 'cancelled_by_' || b.cancel_reason,
				'SUCCEEDED', 'seed-' || b.id, b.updated_at, b.updated_at + interval '1 hour'
			 FROM booking b JOIN payment p ON p.booking_id = b.id
			 WHERE b.car_id = ANY($1) AND b.status = 'CANCELLED' AND b.refund_amount > 0`,
			`UPDATE booking SET refund_status = 'SUCCEEDED'
			 WHERE car_id = ANY($1) AND status = 'CANCELLED' AND refund_amount > 0`,
		} {
			if _, err := tx.Exec(ctx, q, carIDs); err != nil {
				return fmt.Errorf("seed: money of the car history: %w", err)
			}
		}
		events, err = copyHistoryEvents(ctx, tx, carIDs, now.Add(-eventRetention))
		return err
	})
	return events, err
}

// paidAt is when a seeded booking's charge succeeded: half-way through its
// hold.
const paidAt = `created_at + (hold_expires_at - created_at) / 2`

// copyHistoryEvents writes, for every booking of the cars changed since
// `since`, one published booking event per version, each carrying the
// booking as it was then.
func copyHistoryEvents(ctx context.Context, tx pgx.Tx, carIDs []int64, since time.Time) (int, error) {
	rows, err := tx.Query(ctx, `SELECT `+booking.Columns+`, `+paidAt+` FROM booking
		WHERE car_id = ANY($1) AND updated_at >= $2 ORDER BY id`, carIDs, since)
	if err != nil {
		return 0, fmt.Errorf("seed: read the recent car history: %w", err)
	}
	type event struct {
		b    booking.Booking
		paid time.Time
	}
	var recent []event
	for rows.Next() {
		var paid time.Time
		b, err := booking.Scan(scanPlus{rows, &paid})
		if err != nil {
			rows.Close()
			return 0, fmt.Errorf("seed: read the recent car history: %w", err)
		}
		recent = append(recent, event{*b, paid})
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("seed: read the recent car history: %w", err)
	}
	var out [][]any
	for _, r := range recent {
		for _, st := range steps(r.b, r.paid) {
			payload, err := json.Marshal(st.View())
			if err != nil {
				return 0, err
			}
			out = append(out, []any{st.ID, booking.EventType(st.Status), string(payload), st.UpdatedAt, st.UpdatedAt})
		}
	}
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"outbox"}, []string{"booking_id", "type", "payload", "created_at", "published_at"},
		pgx.CopyFromRows(out))
	if err != nil {
		return 0, fmt.Errorf("seed: copy the car history's events: %w", err)
	}
	return len(out), nil
}

// steps returns booking b at each of its versions, oldest first, as the
// lifecycle would have moved it: held, then confirmed when paid (or
// expired), then on trip at pickup, completed or cancelled.
func steps(b booking.Booking, paid time.Time) []booking.Booking {
	path := map[booking.Status][]booking.Status{
		booking.Expired:   {booking.Held, booking.Expired},
		booking.Confirmed: {booking.Held, booking.Confirmed},
		booking.OnTrip:    {booking.Held, booking.Confirmed, booking.OnTrip},
		booking.Completed: {booking.Held, booking.Confirmed, booking.OnTrip, booking.Completed},
		booking.Cancelled: {booking.Held, booking.Confirmed, booking.Cancelled},
	}[b.Status]
	out := make([]booking.Booking, 0, len(path))
	for i, s := range path {
		st := b
		st.Status, st.Version = s, i+1
		st.CancelReason, st.RefundAmount, st.RefundStatus = "", nil, ""
		switch s {
		case booking.Held:
			st.UpdatedAt = b.CreatedAt
		case booking.Confirmed:
			st.UpdatedAt = paid
		case booking.OnTrip:
			st.UpdatedAt = b.StartsAt
		case booking.Cancelled:
			st.CancelReason, st.RefundAmount = b.CancelReason, b.RefundAmount
			if b.RefundAmount != nil && *b.RefundAmount > 0 {
				st.RefundStatus = "REQUESTED"
			}
		}
		out = append(out, st)
	}
	return out
}

// scanPlus scans a row of booking.Columns followed by more columns.
type scanPlus struct {
	rows  pgx.Rows
	extra any
}

func (s scanPlus) Scan(dest ...any) error { return s.rows.Scan(append(dest, s.extra)...) }
