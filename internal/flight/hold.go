package flight

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
)

// MaxSeats is the most seats one booking may hold.
const MaxSeats = 9

// HoldRequest asks to hold seats of one fare class: the listed seats, or a
// quantity counted against the class quota with seats assigned later.
type HoldRequest struct {
	CustomerID int64
	FlightID   int64
	FareClass  string
	Seats      []string // nil for a quantity hold
	Quantity   int      // 0 for a seat hold
}

// Validate checks the request on its own, before any database work, and
// sorts the seats: every transaction locks seats in seat order, whatever
// order the client sent, so two group holds can never deadlock.
func (r *HoldRequest) Validate() error {
	switch {
	case r.FlightID <= 0:
		return fault.Invalid("flightId", "must be a flight id")
	case r.FareClass == "":
		return fault.Invalid("fareClass", "is required")
	case !classRe.MatchString(r.FareClass):
		return fault.Invalid("fareClass", "no fare class %q", r.FareClass)
	case r.Seats != nil && r.Quantity != 0:
		return fault.Invalid("quantity", "give either seats or quantity, not both")
	case r.Seats == nil && r.Quantity == 0:
		return fault.Invalid("seats", "give the seats to hold, or a quantity")
	case r.Seats != nil && len(r.Seats) == 0:
		return fault.Invalid("seats", "must not be empty")
	case len(r.Seats) > MaxSeats:
		return fault.Invalid("seats", "at most %d seats per booking", MaxSeats)
	case r.Seats == nil && (r.Quantity < 1 || r.Quantity > MaxSeats):
		return fault.Invalid("quantity", "must be between 1 and %d", MaxSeats)
	}
	seen := make(map[string]int, len(r.Seats))
	for i, s := range r.Seats {
		field := fmt.Sprintf("seats[%d]", i)
		if !seatRe.MatchString(s) {
			return fault.Invalid(field, "%q is not a seat number like 12A", s)
		}
		if j, dup := seen[s]; dup {
			return fault.Invalid(field, "seat %s is also seats[%d]", s, j)
		}
		seen[s] = i
	}
	if r.Seats != nil {
		r.Seats = slices.Clone(r.Seats)
		slices.Sort(r.Seats)
	}
	return nil
}

// units is how much of the class quota the request takes.
func (r *HoldRequest) units() int {
	if r.Seats != nil {
		return len(r.Seats)
	}
	return r.Quantity
}

// Hold holds the request in its own transaction. See HoldTx.
func (s *Service) Hold(ctx context.Context, r HoldRequest) (*booking.Booking, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	var b *booking.Booking
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		b, err = HoldTx(ctx, tx, r, s.clock.Now(), s.holdTTL)
		return err
	})
	return b, err
}

// HoldTx holds a validated request within tx, all or nothing: every seat is
// held and the class quota reserved, or tx must be rolled back. The price
// is the server's: the fare's price times the units held.
//
// The hot fare counter is updated last, so its row lock is held only for
// the rest of the commit: seats (locked in seat order) and the booking row
// come first. Returns fault.ValidationFailed (unknown flight, class or
// seat; departed flight), fault.SeatUnavailable or fault.SoldOut.
func HoldTx(ctx context.Context, tx pgx.Tx, r HoldRequest, now time.Time, ttl time.Duration) (*booking.Booking, error) {
	var (
		departure time.Time
		price     *int64
		currency  *string
		rule      []byte
	)
	err := tx.QueryRow(ctx, `SELECT f.departure_at, fi.price, fi.currency, fi.refund_rule
		FROM flight f LEFT JOIN fare_inventory fi ON fi.flight_id = f.id AND fi.fare_class = $2
		WHERE f.id = $1`, r.FlightID, r.FareClass).Scan(&departure, &price, &currency, &rule)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fault.Invalid("flightId", "no flight %d", r.FlightID)
	case err != nil:
		return nil, fmt.Errorf("hold on flight %d: %w", r.FlightID, err)
	case price == nil:
		return nil, fault.Invalid("fareClass", "flight %d has no fare class %s", r.FlightID, r.FareClass)
	case !departure.After(now):
		return nil, fault.Invalid("flightId", "flight %d has departed", r.FlightID)
	}
	n := r.units()
	expires := now.Add(ttl)
	if expires.After(departure) {
		expires = departure
	}
	var seats []string
	if r.Seats != nil {
		seats = r.Seats
	}
	b, err := booking.Scan(tx.QueryRow(ctx, `INSERT INTO booking (kind, status, customer_id, amount, currency,
			hold_expires_at, starts_at, refund_rule, flight_id, fare_class, seats, quantity, created_at, updated_at)
		VALUES ('flight', 'HELD', $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)
		RETURNING `+booking.Columns,
		r.CustomerID, *price*int64(n), *currency, expires, departure, json.RawMessage(rule),
		r.FlightID, r.FareClass, seats, n, now))
	if err != nil {
		return nil, fmt.Errorf("insert booking on flight %d: %w", r.FlightID, err)
	}
	if seats != nil {
		if err := holdSeats(ctx, tx, r, b.ID, expires, now); err != nil {
			return nil, err
		}
	}
	if err := booking.Record(ctx, tx, b, now); err != nil {
		return nil, err
	}
	tag, err := tx.Exec(ctx, `UPDATE fare_inventory SET held = held + $3
		WHERE flight_id = $1 AND fare_class = $2 AND sold + held + $3 <= capacity + overbook_limit`,
		r.FlightID, r.FareClass, n)
	if err != nil {
		return nil, fmt.Errorf("reserve quota on flight %d: %w", r.FlightID, err)
	}
	if tag.RowsAffected() != 1 {
		return nil, fault.New(fault.SoldOut, "fare class %s of flight %d has no %d units left", r.FareClass, r.FlightID, n)
	}
	return b, nil
}

// holdSeats takes every requested seat for booking id, or fails. A seat is
// taken only if it is available, or held by a hold that has expired (which
// need not wait for the sweeper). The rows are locked in seat order first.
func holdSeats(ctx context.Context, tx pgx.Tx, r HoldRequest, id int64, until, now time.Time) error {
	tag, err := tx.Exec(ctx, `WITH locked AS (
			SELECT seat_no FROM seat WHERE flight_id = $1 AND seat_no = ANY($2) ORDER BY seat_no FOR UPDATE)
		UPDATE seat s SET status = 'HELD', booking_id = $4, held_until = $5
		FROM locked l
		WHERE s.flight_id = $1 AND s.seat_no = l.seat_no AND s.fare_class = $3
		  AND (s.status = 'AVAILABLE' OR (s.status = 'HELD' AND s.held_until <= $6))`,
		r.FlightID, r.Seats, r.FareClass, id, until, now)
	if err != nil {
		return fmt.Errorf("hold seats on flight %d: %w", r.FlightID, err)
	}
	if int(tag.RowsAffected()) == len(r.Seats) {
		return nil
	}
	return whySeatsUnavailable(ctx, tx, r)
}

// whySeatsUnavailable tells a client whose seats could not all be held
// whether it asked for something that does not exist (422) or lost to
// someone else (409).
func whySeatsUnavailable(ctx context.Context, tx pgx.Tx, r HoldRequest) error {
	rows, err := tx.Query(ctx, `SELECT seat_no, fare_class FROM seat WHERE flight_id = $1 AND seat_no = ANY($2)`,
		r.FlightID, r.Seats)
	if err != nil {
		return fmt.Errorf("check seats on flight %d: %w", r.FlightID, err)
	}
	class := map[string]string{}
	var seat, fc string
	_, err = pgx.ForEachRow(rows, []any{&seat, &fc}, func() error { class[seat] = fc; return nil })
	if err != nil {
		return fmt.Errorf("check seats on flight %d: %w", r.FlightID, err)
	}
	for _, s := range r.Seats {
		switch c, ok := class[s]; {
		case !ok:
			return fault.Invalid("seats", "flight %d has no seat %s", r.FlightID, s)
		case c != r.FareClass:
			return fault.Invalid("seats", "seat %s is in fare class %s, not %s", s, c, r.FareClass)
		}
	}
	return fault.New(fault.SeatUnavailable, "seats %s: at least one is held or sold", strings.Join(r.Seats, ", "))
}
