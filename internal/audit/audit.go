// Package audit checks berth's invariants (DESIGN.md, I1–I7) against a
// database. Each check is one query that lists violations, so a failing
// check says what is wrong, not only that something is.
package audit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Result is one invariant's verdict.
type Result struct {
	ID         string // "I1"
	Name       string
	OK         bool
	Violations []string // up to maxShown examples
	Count      int      // how many violations in all
}

const maxShown = 10

// Options tune the audit.
type Options struct {
	Now           time.Time
	SweepInterval time.Duration
}

type check struct {
	id, name string
	// query lists one violation per row as text, with args as parameters.
	query string
	args  func(Options) []any
}

func now(o Options) []any            { return []any{o.Now} }
func nowAndInterval(o Options) []any { return []any{o.Now, o.SweepInterval} }
func none(Options) []any             { return nil }

var checks = []check{
	{id: "I1", name: "seats: a HELD or SOLD seat belongs to a live booking in the same state, and a live booking's seats are all its own", args: now, query: `
		SELECT format('seat %s/%s is %s for booking %s which is %s', s.flight_id, s.seat_no, s.status, s.booking_id, coalesce(b.status, 'missing'))
		FROM seat s LEFT JOIN booking b ON b.id = s.booking_id
		WHERE s.status <> 'AVAILABLE' AND (b.id IS NULL
			OR b.flight_id <> s.flight_id OR b.fare_class <> s.fare_class OR NOT (s.seat_no = ANY (b.seats))
			OR (s.status = 'SOLD' AND b.status <> 'CONFIRMED')
			OR (s.status = 'HELD' AND b.status <> 'HELD'))
		UNION ALL
		SELECT format('booking %s (%s) lists seat %s/%s, which is %s for %s', b.id, b.status, b.flight_id, u.no,
			coalesce(s.status, 'missing'), coalesce(s.booking_id::text, 'nobody'))
		FROM booking b CROSS JOIN LATERAL unnest(b.seats) AS u(no)
		LEFT JOIN seat s ON s.flight_id = b.flight_id AND s.seat_no = u.no
		WHERE b.kind = 'flight' AND (b.status = 'CONFIRMED' OR (b.status = 'HELD' AND b.hold_expires_at > $1))
		  AND (s.booking_id IS DISTINCT FROM b.id
			OR s.status <> CASE b.status WHEN 'CONFIRMED' THEN 'SOLD' ELSE 'HELD' END)`},
	// The counters equal the bookings' units by status at every commit, not
	// only at rest: a hold that reclaimed an expired seat counts again, but
	// so does the expired booking until it is swept.
	{id: "I2", name: "fare quota: sold + held <= capacity + overbook limit, counters equal the bookings' units", args: none, query: `
		WITH live AS (
			SELECT flight_id, fare_class,
				sum(quantity) FILTER (WHERE status = 'HELD') AS held,
				sum(quantity) FILTER (WHERE status = 'CONFIRMED') AS sold
			FROM booking WHERE kind = 'flight' AND status IN ('HELD', 'CONFIRMED')
			GROUP BY flight_id, fare_class)
		SELECT format('flight %s %s: sold %s held %s capacity %s overbook %s, live bookings sold %s held %s',
			f.flight_id, f.fare_class, f.sold, f.held, f.capacity, f.overbook_limit, coalesce(l.sold, 0), coalesce(l.held, 0))
		FROM fare_inventory f LEFT JOIN live l USING (flight_id, fare_class)
		WHERE f.sold + f.held > f.capacity + f.overbook_limit
		   OR f.sold <> coalesce(l.sold, 0) OR f.held <> coalesce(l.held, 0)`},
	// A payment row is money the gateway reported received. It either
	// confirmed its booking (outcome 'confirmed') or is owed back in full.
	{id: "I4", name: "a booking is confirmed only by a charge of its full amount received before its hold expired; every charge confirms exactly one booking or is refunded exactly once", args: none, query: `
		SELECT format('booking %s is %s without a charge of %s %s received before its hold expired at %s',
			b.id, b.status, b.amount, b.currency, b.hold_expires_at)
		FROM booking b
		WHERE b.status IN ('CONFIRMED', 'ON_TRIP', 'COMPLETED')
		  AND NOT EXISTS (SELECT 1 FROM payment p WHERE p.booking_id = b.id AND p.outcome = 'confirmed'
			AND p.amount = b.amount AND p.currency = b.currency AND p.received_at < b.hold_expires_at)
		UNION ALL
		SELECT format('charge %s of %s %s confirmed booking %s, which is %s (%s %s, held until %s); received at %s',
			p.provider_txn_id, p.amount, p.currency, p.booking_id, coalesce(b.status, 'missing'),
			b.amount, b.currency, b.hold_expires_at, p.received_at)
		FROM payment p LEFT JOIN booking b ON b.id = p.booking_id
		WHERE p.outcome = 'confirmed' AND (b.id IS NULL
			OR b.status NOT IN ('CONFIRMED', 'ON_TRIP', 'COMPLETED', 'CANCELLED')
			OR b.cancel_reason = 'payment_failed'
			OR p.amount <> b.amount OR p.currency <> b.currency OR p.received_at >= b.hold_expires_at)
		UNION ALL
		SELECT format('charge %s of %s %s for booking %s did not confirm it (%s) and has %s refunds of %s in all, not one of the full amount',
			p.provider_txn_id, p.amount, p.currency, p.booking_id, p.reason, r.n, r.total)
		FROM payment p
		CROSS JOIN LATERAL (SELECT count(*) AS n, coalesce(sum(amount), 0) AS total FROM refund WHERE payment_id = p.id) r
		WHERE p.outcome = 'refund' AND p.amount > 0 AND (r.n <> 1 OR r.total <> p.amount)`},
	// Per charge: what was received minus what was refunded is what berth
	// keeps — the booking's amount while it stands, the cancellation fee
	// once it is cancelled, nothing when it confirmed nothing. Summed, it
	// is the ledger: charges − refunds = confirmed amounts + retained fees.
	{id: "I5", name: "money balances: charges − refunds = confirmed amounts + retained cancellation fees", args: none, query: `
		SELECT format('charge %s of %s %s for booking %s (%s): %s refunded, so %s kept, but %s is due',
			p.provider_txn_id, p.amount, p.currency, p.booking_id, coalesce(b.status, 'missing'), r.total, p.amount - r.total, due.amount)
		FROM payment p
		LEFT JOIN booking b ON b.id = p.booking_id
		CROSS JOIN LATERAL (SELECT coalesce(sum(amount), 0) AS total FROM refund WHERE payment_id = p.id) r
		CROSS JOIN LATERAL (SELECT CASE
			WHEN p.outcome = 'refund' THEN 0
			WHEN b.status IN ('CONFIRMED', 'ON_TRIP', 'COMPLETED') THEN b.amount
			WHEN b.status = 'CANCELLED' THEN b.amount - coalesce(b.refund_amount, 0)
			ELSE 0 END AS amount) due
		WHERE p.amount - r.total <> due.amount
		UNION ALL
		SELECT format('refund %s of %s %s is in another currency than its charge %s (%s)',
			r.id, r.amount, r.currency, p.provider_txn_id, p.currency)
		FROM refund r JOIN payment p ON p.id = r.payment_id
		WHERE r.currency <> p.currency`},
	{id: "I7", name: "no HELD booking stays past its expiry plus one sweep interval", args: nowAndInterval, query: `
		SELECT format('booking %s held until %s', id, hold_expires_at)
		FROM booking WHERE status = 'HELD' AND hold_expires_at + $2::interval < $1`},
}

// Run checks every invariant.
func Run(ctx context.Context, pool *pgxpool.Pool, o Options) ([]Result, error) {
	results := make([]Result, 0, len(checks))
	for _, c := range checks {
		r := Result{ID: c.id, Name: c.name}
		rows, err := pool.Query(ctx, c.query, c.args(o)...)
		if err != nil {
			return nil, fmt.Errorf("audit %s: %w", c.id, err)
		}
		all, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("audit %s: %w", c.id, err)
		}
		r.Count = len(all)
		r.OK = r.Count == 0
		r.Violations = all[:min(len(all), maxShown)]
		results = append(results, r)
	}
	return results, nil
}

// Failed reports whether any result is a violation.
func Failed(results []Result) bool {
	for _, r := range results {
		if !r.OK {
			return true
		}
	}
	return false
}

// Format renders results as the report `berth audit` prints.
func Format(results []Result) string {
	var b strings.Builder
	for _, r := range results {
		verdict := "ok"
		if !r.OK {
			verdict = fmt.Sprintf("VIOLATED (%d)", r.Count)
		}
		fmt.Fprintf(&b, "%-3s %-10s %s\n", r.ID, verdict, r.Name)
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "      %s\n", v)
		}
	}
	return b.String()
}
