package flight

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SearchWindow is how far ahead a search without a date looks.
const SearchWindow = 7 * 24 * time.Hour

// Search returns the flights from one airport to another that have not
// departed yet, by departure time: those departing on date in the origin's
// time zone, or, for a zero date, in the next SearchWindow. Answers may be
// up to the search cache's TTL stale, except that a flight that has
// departed is never returned.
func (s *Service) Search(ctx context.Context, from, to string, date time.Time) ([]*Flight, error) {
	now := s.clock.Now()
	first, last, until := date, date, time.Time{}
	if date.IsZero() {
		// Local departure dates run up to a day either side of UTC's.
		first = now.Add(-24 * time.Hour).Truncate(24 * time.Hour)
		until = now.Add(SearchWindow)
		last = until.Add(24 * time.Hour)
	}
	key := from + "|" + to + "|" + first.Format(time.DateOnly) + "|" + last.Format(time.DateOnly)
	all, err := s.searches.Get(ctx, key, func(ctx context.Context) ([]*Flight, error) {
		return queryFlights(ctx, s.reads(), now, `WHERE f.origin = $1 AND f.destination = $2 AND f.departure_date BETWEEN $3 AND $4
			ORDER BY f.departure_at, f.id LIMIT 500`, from, to, first, last)
	})
	if err != nil {
		return nil, err
	}
	// The cached answer is shared by everyone asking the same: filter a
	// copy by this moment, so a departed flight never shows as bookable.
	out := make([]*Flight, 0, len(all))
	for _, f := range all {
		if f.DepartureAt.After(now) && (until.IsZero() || f.DepartureAt.Before(until)) {
			out = append(out, f)
		}
	}
	return out, nil
}

// Airport is an airport berth flies from or to.
type Airport struct {
	Code     string `json:"code"`
	Name     string `json:"name"`
	City     string `json:"city"`
	Country  string `json:"country"`
	TimeZone string `json:"timeZone"`
}

// Airports returns every airport, by code, from a copy of at most a minute
// ago: the list changes only when an operator adds one, and one load serves
// every caller, however many come at once to a process just started.
func (s *Service) Airports(ctx context.Context) ([]Airport, error) {
	return s.airports.Get(ctx, "", func(ctx context.Context) ([]Airport, error) {
		rows, err := s.reads().Query(ctx, `SELECT code, name, city, country, tz FROM airport ORDER BY code`)
		if err != nil {
			return nil, fmt.Errorf("list airports: %w", err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Airport])
		if err != nil {
			return nil, fmt.Errorf("list airports: %w", err)
		}
		return out, nil
	})
}

// ListQuery selects the flights an operator sees: any of its fields may be
// empty. Without a date, the flights departing from now on, soonest first.
type ListQuery struct {
	From, To string
	Date     time.Time
	Limit    int
}

// MaxList is the most flights List returns at once.
const MaxList = 200

// List returns the flights matching q with their fares and counters, read
// from the primary (an operator watches counters move).
func (s *Service) List(ctx context.Context, q ListQuery) ([]*Flight, error) {
	if q.Limit < 1 || q.Limit > MaxList {
		q.Limit = MaxList
	}
	var date *time.Time
	if !q.Date.IsZero() {
		date = &q.Date
	}
	now := s.clock.Now()
	return queryFlights(ctx, s.pool, now, `WHERE ($1 = '' OR f.origin = $1) AND ($2 = '' OR f.destination = $2)
		  AND CASE WHEN $3::date IS NULL THEN f.departure_at > $4 ELSE f.departure_date = $3 END
		ORDER BY f.departure_at, f.id LIMIT $5`, q.From, q.To, date, now, q.Limit)
}

// queryFlights returns the flights that where (a WHERE clause on flight f,
// with its ORDER BY and LIMIT) selects, with their fares as they read at
// now.
func queryFlights(ctx context.Context, db *pgxpool.Pool, now time.Time, where string, args ...any) ([]*Flight, error) {
	rows, err := db.Query(ctx, `SELECT `+flightColumns+` FROM flight f
		JOIN airport o ON o.code = f.origin JOIN airport d ON d.code = f.destination `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("query flights: %w", err)
	}
	flights, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Flight, error) { return scanFlight(r) })
	if err != nil {
		return nil, fmt.Errorf("query flights: %w", err)
	}
	if err := loadFares(ctx, db, flights, now); err != nil {
		return nil, err
	}
	return flights, nil
}
