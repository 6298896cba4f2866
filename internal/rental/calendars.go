package rental

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

// cityCalendar is a city's cars and the time their live bookings block, as
// one load read them: what car search answers from, in memory, for any
// period. It is never changed once loaded.
type cityCalendar struct {
	cars []*Car   // in id order
	busy [][]span // busy[i]: the blocked ranges of cars[i]'s live bookings
}

// span is a live booking's blocked range [from, to): its period and the
// car's turnaround after it. A HELD booking blocks it only until its hold
// runs out (heldUntil); the others have a zero heldUntil.
type span struct {
	from, to  time.Time
	heldUntil time.Time
}

// overlaps reports whether sp overlaps [from, to).
func (sp span) overlaps(from, to time.Time) bool { return sp.from.Before(to) && from.Before(sp.to) }

// liveAt reports whether sp still blocks at now: a HELD booking's stops
// when its hold runs out.
func (sp span) liveAt(now time.Time) bool { return sp.heldUntil.IsZero() || now.Before(sp.heldUntil) }

// free returns the page of q's cars that no span blocks at now, as the
// database would: a car is free when none of its spans overlaps [q.From,
// q.To plus the car's turnaround).
func (cc *cityCalendar) free(q SearchQuery, now time.Time) *SearchResult {
	res := &SearchResult{Cars: []*Car{}}
	first := sort.Search(len(cc.cars), func(i int) bool { return cc.cars[i].ID > q.After })
	for i := first; i < len(cc.cars); i++ {
		c := cc.cars[i]
		if cc.blocked(i, q.From, q.To.Add(c.Turnaround), now) {
			continue
		}
		if len(res.Cars) == q.Limit {
			res.More = true
			break
		}
		res.Cars = append(res.Cars, c)
	}
	return res
}

// blocked reports whether a span of cars[i] live at now overlaps [from, to).
func (cc *cityCalendar) blocked(i int, from, to, now time.Time) bool {
	for _, sp := range cc.busy[i] {
		if sp.overlaps(from, to) && sp.liveAt(now) {
			return true
		}
	}
	return false
}

// loadCity reads city's calendar on db at the server's time now: its cars,
// and the blocked ranges of their live bookings that end after now (a
// period searched never starts before it). Both statements go in one round
// trip.
func loadCity(ctx context.Context, db interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}, city string, now time.Time) (*cityCalendar, error) {
	batch := &pgx.Batch{}
	batch.Queue(`SELECT `+carColumns+` FROM car WHERE city = $1 ORDER BY id`, city)
	batch.Queue(`SELECT b.car_id, lower(b.blocked), upper(b.blocked),
			CASE WHEN b.status = 'HELD' THEN b.hold_expires_at END
		FROM car c JOIN booking b ON b.car_id = c.id
		WHERE c.city = $1 AND b.kind = 'car' AND b.status IN ('HELD', 'CONFIRMED', 'ON_TRIP')
		  AND upper(b.blocked) > $2
		  AND NOT (b.status = 'HELD' AND b.hold_expires_at <= $2)`, city, now)
	br := db.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }() // the reads below report its errors
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("load the cars of %s: %w", city, err)
	}
	cars, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Car, error) { return scanCar(r) })
	if err != nil {
		return nil, fmt.Errorf("load the cars of %s: %w", city, err)
	}
	cc := &cityCalendar{cars: cars, busy: make([][]span, len(cars))}
	index := make(map[int64]int, len(cars))
	for i, c := range cars {
		index[c.ID] = i
	}
	rows, err = br.Query()
	if err != nil {
		return nil, fmt.Errorf("load the calendars of %s: %w", city, err)
	}
	var (
		car       int64
		sp        span
		heldUntil *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&car, &sp.from, &sp.to, &heldUntil}, func() error {
		// A car listed between the two statements is not in cars yet:
		// the next load has it.
		if i, ok := index[car]; ok {
			sp.heldUntil = time.Time{}
			if heldUntil != nil {
				sp.heldUntil = *heldUntil
			}
			cc.busy[i] = append(cc.busy[i], sp)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load the calendars of %s: %w", city, err)
	}
	return cc, nil
}

// reloadAfter is how old a city's calendar may grow before a search has it
// reloaded in the background, given how long its load took: fresh, or
// twenty times the load if that is longer (a big city's load then keeps the
// database busy at most a twentieth of the time), but never more than half
// of stale, so a city being searched is reloaded before its calendar is too
// old to use.
func reloadAfter(fresh, stale time.Duration) func(took time.Duration) time.Duration {
	return func(took time.Duration) time.Duration {
		return min(max(fresh, 20*took), stale/2)
	}
}
