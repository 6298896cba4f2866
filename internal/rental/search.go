package rental

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/fault"
)

// Search page sizes.
const (
	DefaultSearchLimit = 100
	MaxSearchLimit     = 500
)

// SearchQuery asks for the cars of City free for the whole of [From, To)
// plus their turnaround: a page of at most Limit cars with ids above After.
type SearchQuery struct {
	City     string
	From, To time.Time
	After    int64
	Limit    int // 0 for DefaultSearchLimit
}

// SearchResult is a page of free cars in id order. More says that the next
// page (After = the last car's id) may hold more.
type SearchResult struct {
	Cars []*Car
	More bool
}

// Validate checks q at the server's time now. Returns
// fault.ValidationFailed naming the field.
func (q *SearchQuery) Validate(now time.Time) error {
	if q.Limit == 0 {
		q.Limit = DefaultSearchLimit
	}
	switch {
	case !cityRe.MatchString(q.City):
		return fault.Invalid("city", "must be an upper-case city code, like HN")
	case q.After < 0:
		return fault.Invalid("after", "must be a car id")
	case q.Limit < 1 || q.Limit > MaxSearchLimit:
		return fault.Invalid("limit", "must be between 1 and %d", MaxSearchLimit)
	}
	q.From, q.To = q.From.Truncate(time.Microsecond), q.To.Truncate(time.Microsecond)
	return validPeriod(q.From, q.To, now)
}

// Search returns the cars of a city that are free for a period, turnaround
// included, from the city's calendar kept in memory (cityCalendar): one query
// a city per second or so answers every search of it, for any period and
// page, however many callers ask at once. The answer is at most the search
// TTL stale, and about a second while the city is being searched. A stale
// answer only ever costs the customer a 409 when holding: holds never
// consult it. A hold whose time is up does not count, at the time of the
// search.
//
// Returns fault.ValidationFailed.
func (s *Service) Search(ctx context.Context, q SearchQuery) (*SearchResult, error) {
	now := s.clock.Now()
	if err := q.Validate(now); err != nil {
		return nil, err
	}
	cc, err := s.calendars.Get(ctx, q.City, func(ctx context.Context) (*cityCalendar, error) {
		return loadCity(ctx, s.pool, q.City, s.clock.Now())
	})
	if err != nil {
		return nil, fmt.Errorf("search cars in %s: %w", q.City, err)
	}
	return cc.free(q, now), nil
}

// MaxCalendar is the longest window one calendar request may cover.
const MaxCalendar = 366 * 24 * time.Hour

// Busy is a time no rental of a car may overlap: a booking's period with
// the turnaround after it and before it, or several such back to back, as
// [From, To).
type Busy struct {
	From, To time.Time
}

// Calendar returns when car id is busy in [from, to): the blocked ranges of
// its live bookings, with the turnaround before them too, merged where they touch, and
// nothing about who booked. A hold whose time is up is not busy.
//
// Returns fault.NotFound or fault.ValidationFailed.
func (s *Service) Calendar(ctx context.Context, id int64, from, to time.Time) ([]Busy, error) {
	if err := validSpan(from, to); err != nil {
		return nil, err
	}
	if to.Sub(from) > MaxCalendar {
		return nil, fault.Invalid("to", "a calendar covers at most %d days", MaxCalendar/(24*time.Hour))
	}
	// Both statements go in one round trip; the calendar of a car that
	// does not exist is empty and never read.
	batch := &pgx.Batch{}
	batch.Queue(`SELECT EXISTS (SELECT 1 FROM car WHERE id = $1)`, id)
	// A rental [a, b) blocks [a, b + turnaround): it fits only where that
	// misses every booking's block, so the car is busy from a turnaround
	// before each block too (the car's turnaround now, the one a new
	// rental would get).
	batch.Queue(`SELECT lower(r), upper(r) FROM unnest((
			SELECT range_agg(tstzrange(lower(b.blocked) - c.turnaround, upper(b.blocked), '[)'))
			FROM booking b JOIN car c ON c.id = b.car_id
			WHERE b.kind = 'car' AND b.car_id = $1 AND b.status IN ('HELD', 'CONFIRMED', 'ON_TRIP')
			  AND tstzrange(lower(b.blocked) - c.turnaround, upper(b.blocked), '[)') && tstzrange($2, $3, '[)')
			  AND NOT (b.status = 'HELD' AND b.hold_expires_at <= $4))) AS r
		ORDER BY 1`, id, from, to, s.clock.Now())
	br := s.pool.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }() // the reads above report its errors
	var exists bool
	if err := br.QueryRow().Scan(&exists); err != nil {
		return nil, fmt.Errorf("calendar of car %d: %w", id, err)
	}
	if !exists {
		return nil, fault.New(fault.NotFound, "no car %d", id)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("calendar of car %d: %w", id, err)
	}
	busy, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Busy])
	if err != nil {
		return nil, fmt.Errorf("calendar of car %d: %w", id, err)
	}
	return busy, nil
}
