package rental

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/singleflight"
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
		if sp.from.Before(to) && from.Before(sp.to) && (sp.heldUntil.IsZero() || now.Before(sp.heldUntil)) {
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

// calendars keeps each searched city's calendar in memory. A search that
// finds it older than fresh (longer for a city whose load is slow:
// reloadAfter) has it reloaded in the background and is answered from the
// one there is; a calendar older than stale (the search TTL: a load failing
// that long, or a city nobody searched for a while) is not used, and the
// search waits for a load. So one query a city per fresh interval answers
// every search of the city, for any period, however many arrive: only the
// first search of a city waits on the database, and while the city is
// searched an answer is about fresh old at most.
type calendars struct {
	fresh, stale time.Duration
	max          int // cities kept
	load         func(ctx context.Context, city string) (*cityCalendar, error)

	group singleflight.Group
	mu    sync.Mutex
	city  map[string]*loaded
}

type loaded struct {
	cc   *cityCalendar
	at   time.Time     // when the load began, on this process's clock
	took time.Duration // how long it took
}

// reloadAfter is how old l may grow before a search has it reloaded: fresh,
// or twenty times what the load took if that is longer (a big city's load
// then keeps the database busy at most a twentieth of the time), but never
// more than half of stale, so a city being searched is reloaded before its
// calendar is too old to use.
func (cs *calendars) reloadAfter(l *loaded) time.Duration {
	return min(max(cs.fresh, 20*l.took), cs.stale/2)
}

func newCalendars(fresh, stale time.Duration, max int, load func(context.Context, string) (*cityCalendar, error)) *calendars {
	return &calendars{fresh: fresh, stale: stale, max: max, load: load, city: make(map[string]*loaded)}
}

// get returns city's calendar: the one kept if it is younger than stale
// (starting a reload when it is older than fresh), or a new load, shared
// with every caller asking at once. The load runs detached from any one
// caller's cancellation, bounded on its own.
func (cs *calendars) get(ctx context.Context, city string) (*cityCalendar, error) {
	cs.mu.Lock()
	l := cs.city[city]
	cs.mu.Unlock()
	if l != nil {
		age := time.Since(l.at)
		if age < cs.stale {
			if age >= cs.reloadAfter(l) {
				cs.reload(ctx, city) // in the background: its result is not awaited
			}
			return l.cc, nil
		}
	}
	select {
	case r := <-cs.reload(ctx, city):
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*cityCalendar), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("calendar of %s: %w", city, ctx.Err())
	}
}

// reload loads city once for all callers asking at once and keeps what it
// read. The channel gets the result; nobody has to read it.
func (cs *calendars) reload(ctx context.Context, city string) <-chan singleflight.Result {
	return cs.group.DoChan(city, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		began := time.Now()
		cc, err := cs.load(lctx, city)
		if err != nil {
			return nil, err
		}
		cs.keep(city, &loaded{cc: cc, at: began, took: time.Since(began)})
		return cc, nil
	})
}

// keep stores l as city's calendar, first dropping stale cities (then any,
// down to half) when max are kept: a crowd searching for made-up city
// codes cannot grow the map without bound.
func (cs *calendars) keep(city string, l *loaded) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if _, ok := cs.city[city]; !ok && len(cs.city) >= cs.max {
		for k, o := range cs.city {
			if time.Since(o.at) >= cs.stale || len(cs.city) > cs.max/2 {
				delete(cs.city, k)
			}
		}
	}
	cs.city[city] = l
}
