package rental

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/coalesce"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/policy"
)

// call is one car hold of a batch.
type call = coalesce.Call[HoldRequest, *booking.Booking]

// holdMany holds a batch of validated requests for car carID in one
// transaction (holdBatch) and sets each call's answer; then tells life of
// the stale holds it expired. A returned error means nothing was written;
// for a batch of one it is the request's answer.
func (s *Service) holdMany(ctx context.Context, carID int64, calls []*call) error {
	var expired []*booking.Booking
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		expired, err = holdBatch(ctx, tx, s.life, carID, calls, s.clock.Now(), s.holdTTL, s.holdLimit)
		return err
	})
	switch {
	case err == nil:
	case len(calls) == 1 && pg.Violates(err, "booking_car_no_overlap"):
		// Another process's hold took the period after this one read the
		// calendar: the constraint decided.
		return unavailable(carID, err)
	case len(calls) == 1 && pg.Violates(err, "booking_car_fkey"):
		return fault.Invalid("carId", "no car %d", carID)
	case fault.CodeOf(err) != "":
		return err
	default:
		return fmt.Errorf("hold car %d: %w", carID, err)
	}
	// The stale holds the batch expired gave their period back, as the
	// sweeper's expiry does: told after the commit, like it.
	for _, x := range expired {
		s.life.Released(ctx, x)
	}
	return nil
}

// holdBatch holds each request of calls for car carID within tx, in the
// order given, each all or nothing: a HELD booking whose amount is the
// car's deposit, priced, with the car rental refund rule copied onto it,
// expiring ttl after now (or at pickup, if sooner), its booking.held event,
// and the effect of the request's Idempotency-Key. It sets each call's
// answer; a request refused gets fault.ValidationFailed (unknown car),
// fault.RateLimited or fault.CarUnavailable.
//
// The exclusion constraint decides whether the car is free. The batch
// reads the car's calendar only to leave out, before inserting, the
// requests the constraint would refuse for certain (a live booking, or an
// earlier request of the batch, blocks time the request would block): one
// refused insert would abort the whole batch. The read is made after the
// car's row is locked, which every hold of the car takes, so a request it
// finds free is free unless a writer that does not take the lock got there
// first; the insert then fails, nothing is written, and the error is
// returned (holdMany; the coalescer then holds each request alone).
//
// Stale holds (HELD, their time up) in the way of a request are expired
// through life, in tx, so that a stale hold never blocks the calendar
// until the sweeper comes (docs/invariants.md race 2); they are returned,
// for the caller to tell life.Released once tx has committed.
//
// Locks are taken in one order: the customers' hold-limit locks first
// (limit.Queue), then the car's row. The statements are pipelined: the
// limits, the car's lock and its calendar in one round trip, the inserts in
// a second, the events and the effects in a third: five round trips with
// BEGIN and COMMIT, however many requests the batch has.
//
// An Idempotency-Key that a retry took over refuses the whole batch with
// fault.IdempotencyKeyInUse (the coalescer then holds each request alone,
// and only that one is refused): its booking must not be made.
func holdBatch(ctx context.Context, tx pgx.Tx, life *booking.Lifecycle, carID int64, calls []*call, now time.Time, ttl time.Duration, limit booking.HoldLimit) ([]*booking.Booking, error) {
	var (
		hostID, daily, deposit int64
		currency               string
		turnaround             pgtype.Interval
		found                  bool
		taken                  []booked
		customers              = make([]int64, len(calls))
		from, to               = calls[0].Req.From, calls[0].Req.To
	)
	for i, cl := range calls {
		customers[i] = cl.Req.CustomerID
		from, to = minTime(from, cl.Req.From), maxTime(to, cl.Req.To)
		cl.Out, cl.Err = nil, nil
	}
	batch := &pgx.Batch{}
	allowed := limit.Queue(batch, customers, now)
	batch.Queue(`SELECT host_id, daily_price, deposit, currency, turnaround
		FROM car WHERE id = $1 FOR NO KEY UPDATE`, carID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			found = true
			if err := rows.Scan(&hostID, &daily, &deposit, &currency, &turnaround); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	// The car's live bookings whose blocked range overlaps what the batch
	// would block, in id order, so that two batches clearing the same stale
	// holds lock them in the same order.
	batch.Queue(`SELECT b.id, lower(b.blocked), upper(b.blocked), CASE WHEN b.status = 'HELD' THEN b.hold_expires_at END
		FROM booking b JOIN car c ON c.id = b.car_id
		WHERE b.kind = 'car' AND b.car_id = $1 AND b.status IN ('HELD', 'CONFIRMED', 'ON_TRIP')
		  AND b.blocked && tstzrange($2::timestamptz, $3::timestamptz + c.turnaround, '[)')
		ORDER BY b.id`, carID, from, to).Query(func(rows pgx.Rows) error {
		var (
			b         booked
			heldUntil *time.Time
		)
		_, err := pgx.ForEachRow(rows, []any{&b.id, &b.from, &b.to, &heldUntil}, func() error {
			b.heldUntil = time.Time{}
			if heldUntil != nil {
				b.heldUntil = *heldUntil
			}
			taken = append(taken, b)
			return nil
		})
		return err
	})
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, err
	}
	buffer := time.Duration(turnaround.Microseconds) * time.Microsecond
	var (
		holds []*call
		stale []int64
	)
	for _, cl := range calls {
		r := cl.Req
		if err := allowed.Check(r.CustomerID); err != nil {
			cl.Err = err
			continue
		}
		if !found {
			cl.Err = fault.Invalid("carId", "no car %d", carID)
			continue
		}
		start, end := r.From, r.To.Add(buffer)
		if slices.ContainsFunc(taken, func(b booked) bool { return b.liveAt(now) && b.overlaps(start, end) }) {
			cl.Err = unavailable(carID, nil)
			continue
		}
		for _, b := range taken {
			if !b.liveAt(now) && b.overlaps(start, end) && !slices.Contains(stale, b.id) {
				stale = append(stale, b.id)
			}
		}
		allowed.Take(r.CustomerID)
		holds = append(holds, cl)
		// Later requests of the batch find this one's time taken.
		taken = append(taken, booked{span: span{from: start, to: end}})
	}
	slices.Sort(stale)
	var expired []*booking.Booking
	for _, id := range stale {
		x, err := life.ExpireTx(ctx, tx, id, now)
		if err != nil {
			return nil, err
		}
		if x != nil {
			expired = append(expired, x)
		}
	}
	if len(holds) == 0 {
		return expired, nil
	}
	made, err := insertHolds(ctx, tx, carID, holds, hostID, daily, deposit, currency, now, ttl)
	if err != nil {
		return nil, err
	}
	batch = &pgx.Batch{}
	recorded := make([]func() error, len(holds))
	for i, cl := range holds {
		if err := booking.Queue(batch, made[i], now); err != nil {
			return nil, err
		}
		recorded[i] = pg.QueueEffect(cl.Ctx, batch, booking.EffectOf(made[i].ID))
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, err
	}
	for i, cl := range holds {
		if err := recorded[i](); err != nil {
			return nil, err
		}
		cl.Out = made[i]
	}
	return expired, nil
}

// insertHolds inserts the bookings of holds, all of car carID, in one
// statement, and returns them in the order of holds.
func insertHolds(ctx context.Context, tx pgx.Tx, carID int64, holds []*call, hostID, daily, deposit int64, currency string, now time.Time, ttl time.Duration) ([]*booking.Booking, error) {
	rule, err := json.Marshal(policy.CarRental)
	if err != nil {
		return nil, err
	}
	n := len(holds)
	var (
		customers = make([]int64, n)
		expires   = make([]time.Time, n)
		froms     = make([]time.Time, n)
		tos       = make([]time.Time, n)
		prices    = make([]int64, n)
		offsets   = make([]int32, n)
	)
	for i, cl := range holds {
		r := cl.Req
		customers[i], froms[i], tos[i] = r.CustomerID, r.From, r.To
		expires[i] = minTime(now.Add(ttl), r.From)
		prices[i] = RentalPrice(daily, r.From, r.To)
		_, off := r.From.Zone()
		offsets[i] = int32(off)
	}
	rows, err := tx.Query(ctx, `INSERT INTO booking (kind, status, customer_id, host_id, amount, currency,
			hold_expires_at, starts_at, refund_rule, car_id, period, rental_price, utc_offset, created_at, updated_at)
		SELECT 'car', 'HELD', u.customer, $1, $2, $3, u.expires, u.from_, $4, $5, tstzrange(u.from_, u.to_, '[)'),
		       u.price, u.utc_offset, $6, $6
		FROM unnest($7::bigint[], $8::timestamptz[], $9::timestamptz[], $10::timestamptz[], $11::bigint[], $12::integer[])
		     WITH ORDINALITY AS u(customer, expires, from_, to_, price, utc_offset, n)
		ORDER BY u.n
		RETURNING `+booking.Columns,
		hostID, deposit, currency, rule, carID, now, customers, expires, froms, tos, prices, offsets)
	if err != nil {
		return nil, err
	}
	made, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*booking.Booking, error) { return booking.Scan(row) })
	if err != nil {
		return nil, err
	}
	// Each request's booking is the one of its customer and period: two
	// holds of the batch never share both (their periods would overlap).
	out := make([]*booking.Booking, n)
	for _, b := range made {
		for i, cl := range holds {
			if out[i] == nil && b.CustomerID == cl.Req.CustomerID && b.From.Equal(cl.Req.From) {
				out[i] = b
				break
			}
		}
	}
	for i := range out {
		if out[i] == nil {
			return nil, errors.New("a held booking is missing from the insert's answer")
		}
	}
	return out, nil
}

// booked is a booking of the car as a batch reads it: its id and the time
// it blocks (span).
type booked struct {
	id int64
	span
}

// unavailable is the answer to a request whose period the car's calendar
// blocks.
func unavailable(carID int64, err error) error {
	return &fault.Error{Code: fault.CarUnavailable, Err: err,
		Detail: fmt.Sprintf("car %d is booked (or blocked by its turnaround) in an overlapping period", carID)}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
