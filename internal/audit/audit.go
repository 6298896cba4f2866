// Package audit checks berth's invariants (docs/invariants.md I1–I8) against a
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
	ID         string   `json:"id"` // "I1"
	Name       string   `json:"name"`
	OK         bool     `json:"ok"`
	Violations []string `json:"violations"` // up to maxShown examples
	Count      int      `json:"count"`      // how many violations in all
}

const maxShown = 10

// Options tune the audit.
type Options struct {
	Now           time.Time
	SweepInterval time.Duration
	// EventRetention is how long published events are kept (I6 checks
	// only what retention keeps); zero checks every booking.
	EventRetention time.Duration
	// ConsumerLag, when set, makes I6 report flight booking changes the
	// tickets consumer has not processed after that long.
	ConsumerLag time.Duration
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
	{id: "I2", name: "fare quota: sold + held <= capacity + overbook limit, bucket shares add up to it, counters equal the bookings' units", args: none, query: `
		WITH live AS (
			SELECT flight_id, fare_class, fare_bucket AS bucket,
				coalesce(sum(quantity) FILTER (WHERE status = 'HELD'), 0) AS held,
				coalesce(sum(quantity) FILTER (WHERE status = 'CONFIRMED'), 0) AS sold
			FROM booking WHERE kind = 'flight' AND status IN ('HELD', 'CONFIRMED')
			GROUP BY 1, 2, 3),
		class AS (
			SELECT flight_id, fare_class, sum(quota) AS quota, sum(sold) AS sold, sum(held) AS held
			FROM fare_bucket GROUP BY 1, 2)
		SELECT format('flight %s %s: sold %s + held %s, quota shares %s, capacity %s + overbook %s',
			f.flight_id, f.fare_class, c.sold, c.held, c.quota, f.capacity, f.overbook_limit)
		FROM fare_inventory f LEFT JOIN class c USING (flight_id, fare_class)
		WHERE c.quota IS DISTINCT FROM f.capacity + f.overbook_limit OR c.sold + c.held > f.capacity + f.overbook_limit
		UNION ALL
		SELECT format('flight %s %s bucket %s: sold %s held %s, live bookings sold %s held %s',
			flight_id, fare_class, bucket, coalesce(b.sold, 0), coalesce(b.held, 0), coalesce(l.sold, 0), coalesce(l.held, 0))
		FROM fare_bucket b FULL JOIN live l USING (flight_id, fare_class, bucket)
		WHERE coalesce(b.sold, 0) <> coalesce(l.sold, 0) OR coalesce(b.held, 0) <> coalesce(l.held, 0)
			OR b.quota IS NULL OR b.sold + b.held > b.quota`},
	// Recomputed from each booking's period and its car's turnaround, not
	// from the blocked column the constraint uses, so that a wrong trigger
	// or a dropped constraint shows here.
	{id: "I3", name: "cars: no two live bookings of one car overlap, turnaround included", args: none, query: `
		WITH live AS (
			SELECT b.id, b.car_id, b.status, b.period, c.turnaround,
				tstzrange(lower(b.period), upper(b.period) + c.turnaround, '[)') AS span
			FROM booking b JOIN car c ON c.id = b.car_id
			WHERE b.kind = 'car' AND b.status IN ('HELD', 'CONFIRMED', 'ON_TRIP'))
		SELECT format('car %s: booking %s (%s, %s) and booking %s (%s, %s) overlap with the turnaround of %s',
			x.car_id, x.id, x.status, x.period, y.id, y.status, y.period, x.turnaround)
		FROM live x JOIN live y ON y.car_id = x.car_id AND y.id > x.id AND y.span && x.span
		UNION ALL
		SELECT format('booking %s of car %s blocks %s, not its period %s plus the turnaround %s',
			b.id, b.car_id, b.blocked, b.period, coalesce(c.turnaround::text, '(no such car)'))
		FROM booking b LEFT JOIN car c ON c.id = b.car_id
		WHERE b.kind = 'car' AND (c.id IS NULL
			OR b.blocked IS DISTINCT FROM tstzrange(lower(b.period), upper(b.period) + c.turnaround, '[)'))`},
	i6,
	{id: "I7", name: "no HELD booking stays past its expiry plus one sweep interval", args: nowAndInterval, query: `
		SELECT format('booking %s held until %s', id, hold_expires_at)
		FROM booking WHERE status = 'HELD' AND hold_expires_at + $2::interval < $1`},
	i4,
	i5,
	i8,
}

// i8 checks the waitlists: no unit of a class that has not departed is free
// at rest while an entry of its line that fits waits; every OFFERED entry
// has exactly one live offer, a HELD booking of its customer for its class
// and quantity (DONE once that booking left HELD); no booking is the offer
// of two entries (a unique key, checked here too).
var i8 = check{id: "I8", name: "waitlists: no unit free while a fitting entry waits; every offer is one live hold of its entry", args: now, query: `
	WITH room AS (
		SELECT flight_id, fare_class, sum(quota - sold - held) AS free FROM fare_bucket GROUP BY 1, 2)
	SELECT format('flight %s %s has %s units free while waitlist entry %s waits for %s', w.flight_id, w.fare_class, r.free, w.id, w.quantity)
	FROM waitlist w JOIN room r USING (flight_id, fare_class) JOIN flight f ON f.id = w.flight_id
	WHERE w.status = 'WAITING' AND w.quantity <= r.free AND f.departure_at > $1
	UNION ALL
	SELECT format('waitlist entry %s is %s with booking %s, which is %s', w.id, w.status, w.booking_id, coalesce(b.status, 'missing'))
	FROM waitlist w LEFT JOIN booking b ON b.id = w.booking_id
	WHERE w.status IN ('OFFERED', 'DONE') AND (b.id IS NULL OR b.customer_id <> w.customer_id OR b.flight_id <> w.flight_id
		OR b.fare_class <> w.fare_class OR b.quantity <> w.quantity OR (w.status = 'OFFERED') <> (b.status = 'HELD'))
	UNION ALL
	SELECT format('booking %s is the offer of %s waitlist entries', booking_id, count(*))
	FROM waitlist WHERE booking_id IS NOT NULL GROUP BY booking_id HAVING count(*) > 1`}

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
