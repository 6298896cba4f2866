package rental

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/money"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/text"
)

// Car is a car a host rents out. Values returned by Search are shared and
// must not be modified.
type Car struct {
	ID         int64
	HostID     int64
	Plate      string
	Model      string
	City       string
	DailyPrice int64 // minor units per started 24 hours
	Deposit    int64 // minor units, paid when the booking is held
	Currency   string
	// Turnaround is the cleaning and inspection time after every rental,
	// blocked in the calendar with it.
	Turnaround time.Duration
	CreatedAt  time.Time
}

// NewCar is what a host gives to list a car.
type NewCar struct {
	HostID     int64
	Plate      string
	Model      string
	City       string
	DailyPrice int64
	Deposit    int64
	Currency   string
	Turnaround time.Duration
}

// Limits of a car's listing.
const (
	MaxTurnaround = 48 * time.Hour
	maxPrice      = 1_000_000_000_000
)

var (
	plateRe = regexp.MustCompile(`^[A-Z0-9][A-Z0-9.-]{1,19}$`)
	cityRe  = regexp.MustCompile(`^[A-Z]{2,8}$`)
)

// validate checks nc and normalises its plate (plates are case-insensitive
// and often typed with spaces).
func (nc *NewCar) validate() error {
	if err := text.Check(nc.Plate, 40); err != nil {
		return fault.Invalid("plate", "%v", err)
	}
	if err := text.Check(nc.Model, 100); err != nil {
		return fault.Invalid("model", "%v", err)
	}
	nc.Plate = strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(nc.Plate), " ", ""))
	nc.Model = strings.TrimSpace(nc.Model)
	switch {
	case !plateRe.MatchString(nc.Plate):
		return fault.Invalid("plate", "must be 2 to 20 letters, digits, dots or dashes, like 30A-123.45")
	case !text.Visible(nc.Model):
		return fault.Invalid("model", "must be 1 to 100 characters, one of them visible")
	case !cityRe.MatchString(nc.City):
		return fault.Invalid("city", "must be an upper-case city code, like HN")
	case nc.DailyPrice <= 0 || nc.DailyPrice > maxPrice:
		return fault.Invalid("dailyPrice", "must be a positive amount in minor units, at most %d", int64(maxPrice))
	case nc.Deposit < 0 || nc.Deposit > maxPrice:
		return fault.Invalid("deposit", "must be an amount in minor units from 0 to %d", int64(maxPrice))
	case !money.Known(nc.Currency):
		return fault.Invalid("currency", "must be an ISO 4217 code, like VND")
	case nc.Turnaround < 0 || nc.Turnaround > MaxTurnaround:
		return fault.Invalid("turnaround", "must be between 0 and %s", FormatTurnaround(MaxTurnaround))
	case nc.Turnaround%time.Minute != 0:
		return fault.Invalid("turnaround", "must be a whole number of minutes")
	}
	return nil
}

// Create lists a car for nc.HostID. Returns fault.ValidationFailed for bad
// input, including a plate that is already listed.
func (s *Service) Create(ctx context.Context, nc NewCar) (*Car, error) {
	if err := nc.validate(); err != nil {
		return nil, err
	}
	c, err := scanCar(s.pool.QueryRow(ctx, `INSERT INTO car (host_id, plate, model, city, daily_price, deposit,
			currency, turnaround, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		RETURNING `+carColumns,
		nc.HostID, nc.Plate, nc.Model, nc.City, nc.DailyPrice, nc.Deposit, nc.Currency, nc.Turnaround, s.clock.Now()))
	if pg.Violates(err, "car_plate_key") {
		// Unique on letters and digits alone: "30a 123.45" is 30A-123.45.
		return nil, fault.Invalid("plate", "%s is already listed", nc.Plate)
	}
	if pg.Violates(err, "car_city_fkey") {
		return nil, fault.Invalid("city", "%s is not a city berth rents cars in (GET /cities)", nc.City)
	}
	if err != nil {
		return nil, fmt.Errorf("create car %s: %w", nc.Plate, err)
	}
	return c, nil
}

// Get returns car id. Returns fault.NotFound.
func (s *Service) Get(ctx context.Context, id int64) (*Car, error) {
	c, err := scanCar(s.pool.QueryRow(ctx, `SELECT `+carColumns+` FROM car WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fault.New(fault.NotFound, "no car %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get car %d: %w", id, err)
	}
	return c, nil
}

const carColumns = `id, host_id, plate, model, city, daily_price, deposit, currency, turnaround, created_at`

func scanCar(row pgx.Row) (*Car, error) {
	var c Car
	err := row.Scan(&c.ID, &c.HostID, &c.Plate, &c.Model, &c.City, &c.DailyPrice, &c.Deposit, &c.Currency,
		&c.Turnaround, &c.CreatedAt)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// FormatTurnaround writes d the way hosts write it: "2h", "1h30m", "45m",
// "0s".
func FormatTurnaround(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
