package rental

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/coalesce"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/policy"
)

// call is one car hold of a batch.
type call = coalesce.Call[HoldRequest, *booking.Booking]

// holdMany holds a batch of validated requests for car carID (holdBatch)
// and sets each call's answer; then tells life of the stale holds it
// expired. A returned error means nothing was written; for a batch of one
// it is the request's answer.
func (s *Service) holdMany(ctx context.Context, carID int64, calls []*call) error {
	var expired []*booking.Booking
	err := pg.Retry(ctx, func() error {
		var err error
		expired, err = holdBatch(ctx, s.pool, carID, calls, s.clock.Now(), s.holdTTL, s.holdLimit)
		return err
	})
	switch {
	case err == nil:
	case len(calls) == 1 && pg.Violates(err, "booking_car_no_overlap"):
		// Another process's hold took the period after this one read the
		// calendar: the constraint decided.
		return unavailable(carID, err)
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

// holdSQL calls the database function hold_car (migration 00024), which
// decides and writes a batch of holds of one car, each all or nothing, in
// the order given: a HELD booking whose amount is the car's deposit,
// priced by its days, with the car rental refund rule, expiring ttl after now (or at
// pickup, if sooner), its booking.held event, and the effect of the
// request's Idempotency-Key. Under the car's row lock, which every hold of
// the car takes, it reads the calendar and leaves out the requests the
// exclusion constraint would refuse for certain (a live booking, or an
// earlier request of the batch, blocks time the request would block), and
// expires the stale holds in the way of those it holds; the constraint
// decides the rest: a writer that does not take the lock and got there
// first makes the insert fail, and nothing of the batch is written.
var holdSQL = booking.HoldStatement(`hold_car($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::text[]::uuid[], $13, $14)`)

// holdBatch holds the requests of calls for car carID at now (holdSQL): one
// round trip and one commit, whatever the batch's size, the pending
// Idempotency-Keys' claims included (booking.QueryHold), with every rule
// decided by PostgreSQL. It sets each call's answer; a request refused
// gets fault.ValidationFailed (unknown car), fault.RateLimited,
// fault.CarUnavailable or the error of a key it does not hold. It
// returns the stale holds the batch expired, for the caller to tell
// life.Released once committed. A returned error means nothing was
// written.
func holdBatch(ctx context.Context, db booking.Batcher, carID int64, calls []*call, now time.Time, ttl time.Duration, limit booking.HoldLimit) ([]*booking.Booking, error) {
	rule, err := json.Marshal(policy.CarRental)
	if err != nil {
		return nil, err
	}
	n := len(calls)
	var (
		customers = make([]int64, n)
		froms     = make([]time.Time, n)
		tos       = make([]time.Time, n)
		offsets   = make([]int32, n)
		days      = make([]int64, n)
		claims    = make([]pg.KeyClaim, n)
	)
	for i, cl := range calls {
		r := cl.Req
		customers[i], froms[i], tos[i] = r.CustomerID, r.From, r.To
		_, off := r.From.Zone()
		offsets[i] = int32(off)
		days[i] = rentalDays(r.From, r.To)
		claims[i], _ = pg.KeyClaimOf(cl.Ctx)
	}
	callers, keys, leases := booking.KeyArgs(claims)
	maxHolds, window := limit.Args()
	answers, others, err := booking.QueryHold(ctx, db, now, claims, holdSQL, carID, now,
		pgtype.Interval{Microseconds: ttl.Microseconds(), Valid: true},
		customers, froms, tos, offsets, days, rule, callers, keys, leases, maxHolds, window)
	if err != nil {
		return nil, err
	}
	for i, a := range answers {
		if a.Code == "key_in_use" {
			calls[i].Err = claims[i].Lost()
			continue
		}
		calls[i].Out, calls[i].Err = a.Booking, holdError(carID, limit, a.Code, a.Detail)
	}
	expired := make([]*booking.Booking, len(others))
	for i, a := range others {
		expired[i] = a.Booking
	}
	return expired, nil
}

// holdError words the error code hold_car gave a request ("" for none).
func holdError(carID int64, limit booking.HoldLimit, code, detail string) error {
	switch code {
	case "":
		return nil
	case "no_car":
		return fault.Invalid("carId", "no car %d", carID)
	case "car_unavailable":
		return unavailable(carID, nil)
	case "hold_limit":
		return limit.Refused(detail)
	}
	return fmt.Errorf("hold car %d: unknown answer %q", carID, code)
}

// unavailable is the answer to a request whose period the car's calendar
// blocks.
func unavailable(carID int64, err error) error {
	return &fault.Error{Code: fault.CarUnavailable, Err: err,
		Detail: fmt.Sprintf("car %d is booked (or blocked by its turnaround) in an overlapping period", carID)}
}
