package flight

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/money"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/policy"
)

// MaxSchedule is how far ahead a flight may be put on sale: airlines sell
// about a year ahead, and a date past year 9999 could not even be written
// in an answer.
const MaxSchedule = 2 * 366 * 24 * time.Hour

// NewFlight is what an admin gives to create a flight.
type NewFlight struct {
	Code        string
	From, To    string
	DepartureAt time.Time
	ArrivalAt   time.Time
	Fares       []NewFare
}

// NewFare is one fare class of a new flight. Seats lists the seat numbers
// of the class; a class may have none and sell by quantity only.
type NewFare struct {
	Class         string
	Price         int64
	Currency      string
	Capacity      int
	OverbookLimit int
	Seats         []string
	RefundRule    policy.Rule
	// Buckets splits the class quota over this many counter rows; 0 takes
	// the service's default.
	Buckets int
}

var (
	codeRe    = regexp.MustCompile(`^[A-Z0-9]{2,3}[0-9]{1,5}$`)
	airportRe = regexp.MustCompile(`^[A-Z]{3}$`)
	classRe   = regexp.MustCompile(`^[A-Z][A-Z_]{0,15}$`)
	seatRe    = regexp.MustCompile(`^[0-9]{1,3}[A-Z]$`)
)

// Limits of what one flight may have.
const (
	maxFares    = 10
	maxCapacity = 1000
	maxBuckets  = 64
	maxPrice    = 1_000_000_000_000
)

func (nf *NewFlight) validate(now time.Time) error {
	switch {
	case !codeRe.MatchString(nf.Code):
		return fault.Invalid("code", "must be an airline designator and a number, like VN123")
	case !airportRe.MatchString(nf.From):
		return fault.Invalid("from", "must be a three-letter IATA airport code")
	case !airportRe.MatchString(nf.To):
		return fault.Invalid("to", "must be a three-letter IATA airport code")
	case nf.From == nf.To:
		return fault.Invalid("to", "must differ from from")
	case !nf.DepartureAt.After(now):
		return fault.Invalid("departureAt", "must be in the future")
	case nf.DepartureAt.Sub(now) > MaxSchedule:
		return fault.Invalid("departureAt", "must be within %d days from now", MaxSchedule/(24*time.Hour))
	case !nf.ArrivalAt.After(nf.DepartureAt):
		return fault.Invalid("arrivalAt", "must be after departureAt")
	case nf.ArrivalAt.Sub(nf.DepartureAt) > 24*time.Hour:
		return fault.Invalid("arrivalAt", "a flight lasts at most 24 hours")
	case len(nf.Fares) == 0 || len(nf.Fares) > maxFares:
		return fault.Invalid("fares", "must list between 1 and %d fare classes", maxFares)
	}
	classes := map[string]bool{}
	seats := map[string]bool{}
	for i, f := range nf.Fares {
		field := fmt.Sprintf("fares[%d].", i)
		switch {
		case !classRe.MatchString(f.Class):
			return fault.Invalid(field+"fareClass", "must be upper-case letters, like ECONOMY")
		case classes[f.Class]:
			return fault.Invalid(field+"fareClass", "%s is listed twice", f.Class)
		case f.Price < 0 || f.Price > maxPrice:
			return fault.Invalid(field+"price", "must be between 0 and %d minor units", int64(maxPrice))
		case !money.Known(f.Currency):
			return fault.Invalid(field+"currency", "must be an ISO 4217 code")
		case f.Currency != nf.Fares[0].Currency:
			return fault.Invalid(field+"currency", "every fare of a flight must be in one currency")
		case f.Capacity < 0 || f.Capacity > maxCapacity:
			return fault.Invalid(field+"capacity", "must be between 0 and %d", maxCapacity)
		case f.OverbookLimit < 0 || f.OverbookLimit > maxCapacity:
			return fault.Invalid(field+"overbookLimit", "must be between 0 and %d", maxCapacity)
		case f.Buckets < 0 || f.Buckets > maxBuckets:
			return fault.Invalid(field+"buckets", "must be between 1 and %d", maxBuckets)
		case len(f.Seats) > f.Capacity:
			return fault.Invalid(field+"seats", "lists %d seats for a capacity of %d", len(f.Seats), f.Capacity)
		}
		if err := f.RefundRule.Validate(); err != nil {
			return fault.Invalid(field+"refundable", "%v", err)
		}
		classes[f.Class] = true
		for j, s := range f.Seats {
			sf := fmt.Sprintf("%sseats[%d]", field, j)
			if !seatRe.MatchString(s) {
				return fault.Invalid(sf, "%q is not a seat number like 12A", s)
			}
			if seats[s] {
				return fault.Invalid(sf, "seat %s is listed twice", s)
			}
			seats[s] = true
		}
	}
	return nil
}

// Create stores a new flight with its fares and seats, all or nothing.
// Returns fault.ValidationFailed for wrong input (naming the field) and
// fault.InvalidState when the flight already exists.
func (s *Service) Create(ctx context.Context, nf NewFlight) (*Flight, error) {
	if err := nf.validate(s.clock.Now()); err != nil {
		return nil, err
	}
	var id int64
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var known int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM airport WHERE code IN ($1, $2)`, nf.From, nf.To).Scan(&known); err != nil {
			return fmt.Errorf("check airports: %w", err)
		}
		if known != 2 {
			return fault.Invalid("from", "route %s-%s has an airport berth does not know", nf.From, nf.To)
		}
		// A flight number names one flight a day (the departure's date
		// where it departs): a second one that day would be a second
		// flight under one name on tickets and boards. Creations of one
		// code are put one after the other by a lock on the code, and
		// the later sees the earlier's flight. (Not a unique index on
		// (code, departure_date): a database holding such pairs from
		// before could not be migrated.)
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, flightCodeLockClass, nf.Code); err != nil {
			return fmt.Errorf("lock flight code %s: %w", nf.Code, err)
		}
		var same int64
		var date time.Time
		err := tx.QueryRow(ctx, `SELECT coalesce((SELECT f.id FROM flight f WHERE f.code = $1 AND f.departure_date = d.date LIMIT 1), 0), d.date
			FROM (SELECT ($2::timestamptz AT TIME ZONE (SELECT tz FROM airport WHERE code = $3))::date AS date) AS d`,
			nf.Code, nf.DepartureAt, nf.From).Scan(&same, &date)
		if err != nil {
			return fmt.Errorf("look for flight %s that day: %w", nf.Code, err)
		}
		if same != 0 {
			return fault.New(fault.InvalidState, "flight %s already departs on %s (flight %d): a flight number names one flight a day",
				nf.Code, date.Format(time.DateOnly), same)
		}
		err = tx.QueryRow(ctx, `INSERT INTO flight (code, origin, destination, departure_at, arrival_at, departure_date)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`, nf.Code, nf.From, nf.To, nf.DepartureAt, nf.ArrivalAt, date).Scan(&id)
		if err != nil {
			return fmt.Errorf("insert flight: %w", err)
		}
		for _, f := range nf.Fares {
			rule, err := json.Marshal(f.RefundRule)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO fare_inventory (flight_id, fare_class, price, currency, capacity, overbook_limit, refund_rule)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`, id, f.Class, f.Price, f.Currency, f.Capacity, f.OverbookLimit, rule); err != nil {
				return fmt.Errorf("insert fare %s: %w", f.Class, err)
			}
			buckets := f.Buckets
			if buckets == 0 {
				buckets = s.buckets
			}
			if _, err := tx.Exec(ctx, `INSERT INTO fare_bucket (flight_id, fare_class, bucket, quota)
				SELECT $1, $2, n - 1, q FROM unnest($3::int[]) WITH ORDINALITY AS u(q, n)`,
				id, f.Class, splitQuota(f.Capacity+f.OverbookLimit, buckets)); err != nil {
				return fmt.Errorf("insert buckets of %s: %w", f.Class, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO seat (flight_id, seat_no, fare_class)
				SELECT $1, s, $2 FROM unnest($3::text[]) AS s`, id, f.Class, f.Seats); err != nil {
				return fmt.Errorf("insert seats of %s: %w", f.Class, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, id)
}

// flightCodeLockClass is the class of the advisory lock Create takes per
// flight code: "code" in ASCII.
const flightCodeLockClass = 1668244581
