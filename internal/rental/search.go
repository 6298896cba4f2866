package rental

import (
	"context"
	"fmt"
	"strconv"
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
// included, at most the search TTL stale: one query per city, period and
// page per TTL, however many callers ask at once. A stale answer only ever
// costs the customer a 409 when holding: holds never consult it.
//
// Returns fault.ValidationFailed.
func (s *Service) Search(ctx context.Context, q SearchQuery) (*SearchResult, error) {
	if err := q.Validate(s.clock.Now()); err != nil {
		return nil, err
	}
	key := q.City + "|" + q.From.UTC().Format(time.RFC3339Nano) + "|" + q.To.UTC().Format(time.RFC3339Nano) +
		"|" + strconv.FormatInt(q.After, 10) + "|" + strconv.Itoa(q.Limit)
	return s.searches.Get(ctx, key, func(ctx context.Context) (*SearchResult, error) {
		return s.search(ctx, q, s.clock.Now())
	})
}

// search walks the city's cars in id order and probes each one's calendar
// through the exclusion constraint's index (car_id = c.id AND blocked &&
// the period plus c's turnaround), stopping once the page is full. That
// costs a few microseconds per car looked at, and looks at a page's worth
// of cars plus the busy ones among them, where an anti-join would read
// every live booking of every car. A hold whose time is up does not count:
// the next hold of that period expires it.
func (s *Service) search(ctx context.Context, q SearchQuery, now time.Time) (*SearchResult, error) {
	return search(ctx, s.pool, q, now)
}

// search runs q on db. Warm sends the same statement, so that a new
// connection has it prepared and planned before its first customer.
func search(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, q SearchQuery, now time.Time) (*SearchResult, error) {
	rows, err := db.Query(ctx, `SELECT `+carColumns+` FROM car c
		WHERE c.city = $1 AND c.id > $2
		  AND NOT EXISTS (SELECT 1 FROM booking b
			WHERE b.kind = 'car' AND b.car_id = c.id AND b.status IN ('HELD', 'CONFIRMED', 'ON_TRIP')
			  AND b.blocked && tstzrange($3::timestamptz, $4::timestamptz + c.turnaround, '[)')
			  AND NOT (b.status = 'HELD' AND b.hold_expires_at <= $5))
		ORDER BY c.id
		LIMIT $6`, q.City, q.After, q.From, q.To, now, q.Limit+1)
	if err != nil {
		return nil, fmt.Errorf("search cars in %s: %w", q.City, err)
	}
	cars, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Car, error) { return scanCar(r) })
	if err != nil {
		return nil, fmt.Errorf("search cars in %s: %w", q.City, err)
	}
	res := &SearchResult{Cars: cars}
	if len(cars) > q.Limit {
		res.Cars, res.More = cars[:q.Limit], true
	}
	return res, nil
}

// Warm runs a car search once on a new connection, as pg.Warmer asks
// (pg.WarmFunc), so that the first customer's search there does not pay
// for pgx's preparation of the statement (a round trip of its own), its
// planning and the backend's first reads of the car and booking catalogs:
// tens of milliseconds on a loaded machine against a few for the next.
// It searches a day from now for one car of the city of the first car
// listed (none listed: a city with no cars, which still prepares and
// plans). It writes nothing. Reports false when the search failed, as on
// an unmigrated database. now is the server's clock.
func Warm(ctx context.Context, c *pgx.Conn, now time.Time) bool {
	var city string
	err := c.QueryRow(ctx, `SELECT coalesce((SELECT city FROM car ORDER BY id LIMIT 1), '')`).Scan(&city)
	if err != nil {
		return false
	}
	from := now.Add(24 * time.Hour).Truncate(time.Microsecond)
	_, err = search(ctx, c, SearchQuery{City: city, From: from, To: from.Add(24 * time.Hour), Limit: 1}, now)
	return err == nil
}

// MaxCalendar is the longest window one calendar request may cover.
const MaxCalendar = 366 * 24 * time.Hour

// Busy is a time a car cannot be picked up or have: a booking's period with
// the turnaround after it, or several such back to back, as [From, To).
type Busy struct {
	From, To time.Time
}

// Calendar returns when car id is busy in [from, to): the blocked ranges of
// its live bookings, turnaround included, merged where they touch, and
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
	batch.Queue(`SELECT lower(r), upper(r) FROM unnest((
			SELECT range_agg(blocked) FROM booking
			WHERE kind = 'car' AND car_id = $1 AND status IN ('HELD', 'CONFIRMED', 'ON_TRIP')
			  AND blocked && tstzrange($2, $3, '[)')
			  AND NOT (status = 'HELD' AND hold_expires_at <= $4))) AS r
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
