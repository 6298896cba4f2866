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
	{id: "I7", name: "no HELD booking stays past its expiry plus one sweep interval", args: nowAndInterval, query: `
		SELECT format('booking %s held until %s', id, hold_expires_at)
		FROM booking WHERE status = 'HELD' AND hold_expires_at + $2::interval < $1`},
	i4,
	i5,
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
