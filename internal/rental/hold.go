package rental

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/policy"
)

// Limits of one rental.
const (
	// MaxPeriod is the longest period one booking (or search) may cover.
	MaxPeriod = 90 * 24 * time.Hour
	// MaxAdvance is how far ahead of now a rental may start.
	MaxAdvance = 366 * 24 * time.Hour
	// maxOffset is the largest UTC offset PostgreSQL and RFC 3339 agree on.
	maxOffset = 18 * time.Hour
)

// HoldRequest asks to hold a car for the period [From, To). The times keep
// the offset the client wrote them with: the booking renders its times in
// From's offset from then on.
type HoldRequest struct {
	CustomerID int64
	CarID      int64
	From, To   time.Time
}

// Validate checks the request on its own, before any database work, at the
// server's time now, and truncates the times to the microseconds PostgreSQL
// keeps, so that the price is computed from the period stored. Returns
// fault.ValidationFailed naming the field.
func (r *HoldRequest) Validate(now time.Time) error {
	if r.CarID <= 0 {
		return fault.Invalid("carId", "must be a car id")
	}
	r.From, r.To = r.From.Truncate(time.Microsecond), r.To.Truncate(time.Microsecond)
	return validPeriod(r.From, r.To, now)
}

// validPeriod checks a rental period (of a hold or a search) at now.
func validPeriod(from, to, now time.Time) error {
	if err := validSpan(from, to); err != nil {
		return err
	}
	switch {
	case from.Before(now):
		return fault.Invalid("from", "%s is in the past", from.Format(time.RFC3339))
	case from.After(now.Add(MaxAdvance)):
		return fault.Invalid("from", "must be within %d days from now", MaxAdvance/(24*time.Hour))
	case to.Sub(from) > MaxPeriod:
		return fault.Invalid("to", "a rental lasts at most %d days", MaxPeriod/(24*time.Hour))
	}
	return nil
}

// validSpan checks what every span of time asked of the package needs:
// offsets PostgreSQL keeps, and to after from.
func validSpan(from, to time.Time) error {
	if err := validOffset("from", from); err != nil {
		return err
	}
	if err := validOffset("to", to); err != nil {
		return err
	}
	if !to.After(from) {
		return fault.Invalid("to", "must be after from")
	}
	return nil
}

func validOffset(field string, t time.Time) error {
	if _, off := t.Zone(); time.Duration(off)*time.Second > maxOffset || time.Duration(-off)*time.Second > maxOffset {
		return fault.Invalid(field, "the UTC offset must be between -18:00 and +18:00")
	}
	return nil
}

// RentalPrice is what renting at daily for [from, to) costs: the daily
// price times the started 24-hour periods. A rental of 24 hours and one
// minute costs two days.
func RentalPrice(daily int64, from, to time.Time) int64 {
	const day = 24 * time.Hour
	return daily * int64((to.Sub(from)+day-1)/day)
}

// maxTurnWait bounds the wait for a car's turn: a car that cannot serve
// its queue within it is overloaded (503), however long the request may run.
const maxTurnWait = 5 * time.Second

// Hold holds a car in its own transaction. See holdTx.
//
// Queued (Config.Queue), the holds of one car in this process take turns,
// and each first reads the calendar without a lock: a period that a live
// booking already blocks is answered fast with fault.CarUnavailable, without
// a transaction. So when a hundred customers race for one car, the losers
// do not queue on the winner's row lock holding connections (which a burst
// would turn into 503s); they wait their turn holding nothing, then see the
// winner's committed booking with one read. The read only refuses: a period
// it finds free is still decided by the exclusion constraint in holdTx.
func (s *Service) Hold(ctx context.Context, r HoldRequest) (*booking.Booking, error) {
	if err := r.Validate(s.clock.Now()); err != nil {
		return nil, err
	}
	if s.turns != nil {
		wctx, cancel := context.WithTimeout(ctx, maxTurnWait)
		leave, err := s.turns.enter(wctx, r.CarID)
		cancel()
		if err != nil {
			// A deadline (this one or the request's): 503 overloaded.
			return nil, err
		}
		defer leave()
	}
	// One connection for the read and the transaction: the car's turn is
	// not held through a second wait for the pool.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("hold car %d: %w", r.CarID, err)
	}
	if s.turns != nil {
		if err := calendarTaken(ctx, conn, r, s.clock.Now()); err != nil {
			conn.Release()
			return nil, err
		}
	}
	var b *booking.Booking
	var expired []*booking.Booking
	err = pg.InTx(ctx, conn, func(tx pgx.Tx) error {
		var err error
		b, expired, err = holdTx(ctx, tx, s.life, r, s.clock.Now(), s.holdTTL, s.holdLimit)
		return err
	})
	conn.Release()
	if err == nil {
		// The stale holds the hold expired gave their period back, as
		// the sweeper's expiry does: told after the commit, like it.
		for _, x := range expired {
			s.life.Released(ctx, x)
		}
	}
	return b, err
}

// holdTx holds car r.CarID for r's period within tx: a HELD booking whose
// amount is the car's deposit, priced, with the car rental refund rule
// copied onto it, expiring ttl after now (or at pickup, if sooner), its
// booking.held event, and the effect of the request's Idempotency-Key.
//
// The exclusion constraint decides whether the car is free; nothing here
// reads the calendar to decide it. Before inserting, the car's holds that
// overlap the period and whose time is up are expired through life, in tx,
// so that a stale hold never blocks the calendar until the sweeper comes
// (docs/invariants.md race 2).
//
// Locks are taken in one order: the customer's hold-limit lock first
// (limit.Queue), then the car's row. The car's row lock is not what
// prevents double booking (the constraint is); it queues the holds of one
// car, so that competing inserts do not wait on each other's uncommitted
// index entries, which PostgreSQL can only resolve by aborting one of them
// as a deadlock a second later.
//
// The statements are pipelined: the limit, the car's lock and the stale
// holds in one round trip, the insert in a second, the event and the
// effect in a third: five round trips with BEGIN and COMMIT, where one
// statement a round trip took eight. A car's holds take turns, so each
// round trip saved is time every other customer of a popular car waits
// less.
//
// It returns the new booking and the stale holds it expired, whose release
// the caller tells life.Released once tx has committed. Returns
// fault.ValidationFailed (unknown car), fault.RateLimited,
// fault.CarUnavailable or fault.IdempotencyKeyInUse.
func holdTx(ctx context.Context, tx pgx.Tx, life *booking.Lifecycle, r HoldRequest, now time.Time, ttl time.Duration, limit booking.HoldLimit) (*booking.Booking, []*booking.Booking, error) {
	var (
		hostID, daily, deposit int64
		currency               string
		found                  bool
		stale                  []int64
	)
	batch := &pgx.Batch{}
	allowed := limit.Queue(batch, r.CustomerID, now)
	batch.Queue(`SELECT host_id, daily_price, deposit, currency
		FROM car WHERE id = $1 FOR NO KEY UPDATE`, r.CarID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			found = true
			if err := rows.Scan(&hostID, &daily, &deposit, &currency); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	// The car's HELD bookings whose hold ran out by now and whose blocked
	// range overlaps what r would block, in id order, so that two holds
	// clearing the same stale holds lock them in the same order.
	batch.Queue(`SELECT b.id FROM booking b JOIN car c ON c.id = b.car_id
		WHERE b.kind = 'car' AND b.car_id = $1 AND b.status = 'HELD' AND b.hold_expires_at <= $2
		  AND b.blocked && tstzrange($3::timestamptz, $4::timestamptz + c.turnaround, '[)')
		ORDER BY b.id`, r.CarID, now, r.From, r.To).Query(func(rows pgx.Rows) error {
		var err error
		stale, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, nil, fmt.Errorf("hold car %d: %w", r.CarID, err)
	}
	if err := allowed(); err != nil {
		return nil, nil, err
	}
	if !found {
		return nil, nil, fault.Invalid("carId", "no car %d", r.CarID)
	}
	var expired []*booking.Booking
	for _, id := range stale {
		x, err := life.ExpireTx(ctx, tx, id, now)
		if err != nil {
			return nil, nil, err
		}
		if x != nil {
			expired = append(expired, x)
		}
	}
	expires := now.Add(ttl)
	if expires.After(r.From) {
		expires = r.From
	}
	rule, err := json.Marshal(policy.CarRental)
	if err != nil {
		return nil, nil, err
	}
	_, offset := r.From.Zone()
	b, err := booking.Scan(tx.QueryRow(ctx, `INSERT INTO booking (kind, status, customer_id, host_id, amount, currency,
			hold_expires_at, starts_at, refund_rule, car_id, period, rental_price, utc_offset, created_at, updated_at)
		VALUES ('car', 'HELD', $1, $2, $3, $4, $5, $6, $7, $8, tstzrange($6, $9, '[)'), $10, $11, $12, $12)
		RETURNING `+booking.Columns,
		r.CustomerID, hostID, deposit, currency, expires, r.From, rule, r.CarID, r.To,
		RentalPrice(daily, r.From, r.To), offset, now))
	switch {
	case pg.Violates(err, "booking_car_no_overlap"):
		return nil, nil, &fault.Error{Code: fault.CarUnavailable, Err: err,
			Detail: fmt.Sprintf("car %d is booked (or blocked by its turnaround) in an overlapping period", r.CarID)}
	case pg.Violates(err, "booking_car_fkey"):
		return nil, nil, fault.Invalid("carId", "no car %d", r.CarID)
	case err != nil:
		return nil, nil, fmt.Errorf("hold car %d: %w", r.CarID, err)
	}
	batch = &pgx.Batch{}
	if err := booking.Queue(batch, b, now); err != nil {
		return nil, nil, err
	}
	recorded := pg.QueueEffect(ctx, batch, booking.EffectOf(b.ID))
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, nil, fmt.Errorf("hold car %d: %w", r.CarID, err)
	}
	if err := recorded(); err != nil {
		return nil, nil, err
	}
	return b, expired, nil
}

// calendarTaken returns fault.CarUnavailable when a live booking of r's car
// (HELD and not yet expired at now, CONFIRMED or ON_TRIP) blocks time that r
// would block, turnaround included: what booking_car_no_overlap would refuse
// for certain. A car that does not exist is left to holdTx to report.
func calendarTaken(ctx context.Context, db booking.Querier, r HoldRequest, now time.Time) error {
	var taken bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM car c JOIN booking b ON b.car_id = c.id
		WHERE c.id = $1 AND b.kind = 'car'
		  AND (b.status IN ('CONFIRMED', 'ON_TRIP') OR (b.status = 'HELD' AND b.hold_expires_at > $2))
		  AND b.blocked && tstzrange($3::timestamptz, $4::timestamptz + c.turnaround, '[)'))`,
		r.CarID, now, r.From, r.To).Scan(&taken)
	if err != nil {
		return fmt.Errorf("calendar of car %d: %w", r.CarID, err)
	}
	if taken {
		return &fault.Error{Code: fault.CarUnavailable,
			Detail: fmt.Sprintf("car %d is booked (or blocked by its turnaround) in an overlapping period", r.CarID)}
	}
	return nil
}
