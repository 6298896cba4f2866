package flight

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
)

// bucketsMoved is the SQLSTATE hold_flight raises when, locking the fare
// buckets last, it finds that a request it decided on their committed state
// no longer fits, or that the one bucket a lone hold went to filled while
// it waited for it (migration 00025): another transaction took the room in
// between.
const bucketsMoved = "BH001"

// result is the outcome of one request of a batch.
type result struct {
	b   *booking.Booking
	err error
}

// holdSQL calls the database function hold_flight (migrations 00015 and
// 00016), which decides and writes a batch of holds on one flight: it locks
// the seats in seat order, decides each request all or nothing in order
// (flight, class, departure, waitlist, seats, quota with share moved
// between buckets, Idempotency-Key), inserts the bookings, takes the seats,
// writes the booking.held events, records each key's effect, and last
// locks the fare buckets in class and bucket order and updates them, so
// that holds of one class queue on their hottest rows only for the update
// and the commit. It answers each request (booking.Answer): an error code
// and its detail, or the booking. With $11 (lockFirst) the buckets are
// locked before the decision instead; without it, a decision the locked
// buckets no longer bear out raises errBucketsMoved and writes nothing.
// $12 and $13 are the hold limit (booking.HoldLimit.Args), decided per
// customer before any other lock.
var holdSQL = booking.HoldStatement(`hold_flight($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::text[]::uuid[], $11, $12, $13)`)

// holdBatch holds validated requests for one flight, each all or nothing,
// in the order given, and returns one result per request. It is one
// statement sent on its own, after the claims of pending Idempotency-Keys
// if any (booking.QueryHold): one round trip and one commit, with every
// rule decided by PostgreSQL. A request whose context carries an
// Idempotency-Key claim records its effect with its booking. A returned
// error means nothing of the batch was written; pg.State(err) is
// bucketsMoved when the call should be made again with lockFirst.
func holdBatch(ctx context.Context, db booking.Batcher, flightID int64, reqs []*call, now time.Time, ttl time.Duration, limit booking.HoldLimit, lockFirst bool) ([]result, error) {
	n := len(reqs)
	var (
		customers = make([]int64, n)
		classes   = make([]string, n)
		seats     = make([]*string, n)
		units     = make([]int32, n)
		claims    = make([]pg.KeyClaim, n)
	)
	for i, cl := range reqs {
		r := cl.Req
		customers[i], classes[i], units[i] = r.CustomerID, r.FareClass, int32(r.Units())
		if r.Seats != nil {
			joined := strings.Join(r.Seats, ",")
			seats[i] = &joined
		}
		claims[i], _ = pg.KeyClaimOf(cl.Ctx)
	}
	callers, keys, leases := booking.KeyArgs(claims)
	maxHolds, window := limit.Args()
	answers, _, err := booking.QueryHold(ctx, db, now, claims, holdSQL, flightID, now,
		pgtype.Interval{Microseconds: ttl.Microseconds(), Valid: true},
		customers, classes, seats, units, callers, keys, leases, lockFirst, maxHolds, window)
	if err != nil {
		return nil, fmt.Errorf("hold on flight %d: %w", flightID, err)
	}
	results := make([]result, n)
	for i, a := range answers {
		switch {
		case a.Code == "key_in_use":
			results[i].err = claims[i].Lost()
		case a.Code != "":
			results[i].err = holdError(reqs[i].Req, limit, a.Code, a.Detail)
		default:
			results[i].b = a.Booking
		}
	}
	return results, nil
}

// holdError words the error code hold_flight gave request r.
func holdError(r HoldRequest, limit booking.HoldLimit, code, detail string) error {
	switch code {
	case "no_flight":
		return fault.Invalid("flightId", "no flight %d", r.FlightID)
	case "no_class":
		return fault.Invalid("fareClass", "flight %d has no fare class %s", r.FlightID, r.FareClass)
	case "departed":
		return fault.Invalid("flightId", "flight %d has departed", r.FlightID)
	case "queued":
		return queuedError(r.FlightID, r.FareClass)
	case "no_seat":
		return seatClassError(r, detail, "")
	case "seat_class":
		seat, class, _ := strings.Cut(detail, " ")
		return seatClassError(r, seat, class)
	case "seats_taken":
		return seatsTaken(r)
	case "sold_out":
		return soldOut(r.FlightID, r.FareClass, r.Units())
	case "hold_limit":
		return limit.Refused(detail)
	}
	return fmt.Errorf("hold on flight %d: unknown answer %q", r.FlightID, code)
}
