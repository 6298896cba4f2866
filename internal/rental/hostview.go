package rental

import (
	"context"
	"fmt"
	"time"

	"berth.dev/berth/internal/auth"
	"github.com/jackc/pgx/v5"
)

// City is a city cars are rented in, with the time zone a car's times are
// shown in.
type City struct {
	Code     string `json:"code"`
	Name     string `json:"name"`
	TimeZone string `json:"timeZone"`

	loc *time.Location // TimeZone loaded; UTC when it is not one
}

// Cities returns the cities berth knows, by code (cached: operators rarely
// add one).
func (s *Service) Cities(ctx context.Context) ([]City, error) {
	return s.cities.Get(ctx, "", func(ctx context.Context) ([]City, error) {
		rows, err := s.pool.Query(ctx, `SELECT code, name, tz FROM city ORDER BY code`)
		if err != nil {
			return nil, fmt.Errorf("list cities: %w", err)
		}
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (City, error) {
			var c City
			err := r.Scan(&c.Code, &c.Name, &c.TimeZone)
			return c, err
		})
		if err != nil {
			return nil, fmt.Errorf("list cities: %w", err)
		}
		// Loaded once here: every car of a search page asks for its
		// city's zone, and time.LoadLocation reads and parses the zone
		// file on each call.
		for i := range out {
			if out[i].loc, err = time.LoadLocation(out[i].TimeZone); err != nil {
				out[i].loc = time.UTC
			}
		}
		return out, nil
	})
}

// Zone returns the time zone of city's cars: the city's, or UTC for a city
// berth does not list (or when the list cannot be read, which a page's
// labels can survive).
func (s *Service) Zone(ctx context.Context, city string) *time.Location {
	cities, err := s.Cities(ctx)
	if err != nil {
		return time.UTC
	}
	for _, c := range cities {
		if c.Code == city {
			return c.loc
		}
	}
	return time.UTC
}

// HostCars returns a page of the cars caller may manage, in id order: a
// host's own, or every car for an admin; at most limit with ids above
// after. More says a next page may hold more.
func (s *Service) HostCars(ctx context.Context, caller auth.Caller, limit int, after int64) (*SearchResult, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+carColumns+` FROM car
		WHERE ($1 OR host_id = $2) AND id > $3 ORDER BY id LIMIT $4`, caller.Admin(), caller.ID, after, limit+1)
	if err != nil {
		return nil, fmt.Errorf("list cars of host %d: %w", caller.ID, err)
	}
	cars, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Car, error) { return scanCar(r) })
	if err != nil {
		return nil, fmt.Errorf("list cars of host %d: %w", caller.ID, err)
	}
	res := &SearchResult{Cars: cars}
	if len(cars) > limit {
		res.Cars, res.More = cars[:limit], true
	}
	return res, nil
}
