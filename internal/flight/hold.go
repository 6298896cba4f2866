package flight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/coalesce"
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

// Units is how much of the class quota the request takes.
func (r *HoldRequest) Units() int {
	if r.Seats != nil {
		return len(r.Seats)
	}
	return r.Quantity
}

// Hold holds one request. With coalescing on, concurrent holds of the same
// flight share one statement (see coalesce); otherwise the request is a
// batch of one: the same statement, the same rules (holdBatch).
func (s *Service) Hold(ctx context.Context, r HoldRequest) (*booking.Booking, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if s.coalescer != nil {
		return s.coalescer.Do(ctx, r.FlightID, r)
	}
	return coalesce.One(ctx, s.holdMany, r.FlightID, r)
}

// call is one hold of a batch.
type call = coalesce.Call[HoldRequest, *booking.Booking]

// holdMany holds calls (holdTries); when some found their class sold out
// while holds of that class have run out unswept (their units count until
// a hold's expiry is recorded, though every read shows them free), it ends
// those holds itself and tries the sold-out calls once more, so a unit is
// for sale from its hold's expiry on, not from the sweeper's next pass.
func (s *Service) holdMany(ctx context.Context, flightID int64, calls []*call) error {
	due, err := s.holdTries(ctx, flightID, calls)
	if err != nil || len(due) == 0 || s.expirer == nil || !s.expireDue(ctx, flightID, due) {
		return err
	}
	var again []*call
	for _, cl := range calls {
		if fault.Is(cl.Err, fault.SoldOut) && slices.Contains(due, cl.Req.FareClass) {
			again = append(again, cl)
		}
	}
	if _, err := s.holdTries(ctx, flightID, again); err != nil {
		// The first answers stand (the batch made them); only the second
		// chance was lost.
		s.log.Warn("hold again after expiring overdue holds", "flight", flightID, "err", err)
	}
	return nil
}

// holdTries runs holdBatch on the pool and sets each call's answer; again,
// locking the fare buckets first, when the buckets locked last no longer
// bore out its decision (the room was taken meanwhile: rare, near sold
// out); and again when PostgreSQL broke a deadlock by failing it (it locks
// in the order every transaction does, so this is the same safety net
// pg.InTx gives a transaction). It returns the classes found sold out that
// have holds due for expiry (soonestFree).
func (s *Service) holdTries(ctx context.Context, flightID int64, calls []*call) ([]string, error) {
	lockFirst := false
	for attempt := 1; ; attempt++ {
		now := s.clock.Now()
		results, err := holdBatch(ctx, s.pool, flightID, calls, now, s.holdTTL, s.holdLimit, lockFirst)
		if err == nil {
			due := s.soonestFree(ctx, flightID, calls, results, now)
			for i, cl := range calls {
				cl.Out, cl.Err = results[i].b, results[i].err
			}
			return due, nil
		}
		state := pg.State(err)
		if state == bucketsMoved {
			lockFirst = true
		}
		if attempt == 3 || (state != bucketsMoved && state != pg.DeadlockDetected && state != pg.SerializationFailure) {
			return nil, err
		}
	}
}

// maxExpireDue bounds the overdue holds one sold-out batch ends itself;
// the sweeper ends the rest.
const maxExpireDue = 16

// expireDue ends overdue holds of classes of flight, and reports whether
// it ended any.
func (s *Service) expireDue(ctx context.Context, flightID int64, classes []string) bool {
	n := 0
	for n < maxExpireDue {
		ok, err := s.expirer.ExpireOneOf(ctx, s.pool, flightID, classes)
		if err != nil {
			s.log.Warn("expire overdue holds of a sold-out class", "flight", flightID, "err", err)
			break
		}
		if !ok {
			break
		}
		n++
	}
	return n > 0
}

// soonestFree sets, on each sold_out answer of results, when the first
// units of its class held now come back on sale (fault.Error.FreeAt): the
// sold-out hint in front of the database must not outlive that instant, or
// a buyer would be told "sold out" while every read shows a unit free. It
// returns the sold-out classes that have holds already due (their units
// are free in every read, but counted until their expiry is recorded).
// One query for the batch, only when something was sold out; when it
// fails, FreeAt is now, so that no hint is believed at all.
func (s *Service) soonestFree(ctx context.Context, flightID int64, calls []*call, results []result, now time.Time) []string {
	var classes []string
	for i, r := range results {
		if fault.Is(r.err, fault.SoldOut) && !slices.Contains(classes, calls[i].Req.FareClass) {
			classes = append(classes, calls[i].Req.FareClass)
		}
	}
	if len(classes) == 0 {
		return nil
	}
	var due []string
	free := make(map[string]time.Time, len(classes))
	rows, err := s.pool.Query(ctx, `SELECT fare_class, min(hold_expires_at) FILTER (WHERE hold_expires_at > $3),
			count(*) FILTER (WHERE hold_expires_at <= $3)
		FROM booking WHERE flight_id = $1 AND fare_class = ANY ($2) AND status = 'HELD'
		GROUP BY fare_class`, flightID, classes, now)
	if err == nil {
		var (
			class   string
			at      *time.Time
			overdue int
		)
		_, err = pgx.ForEachRow(rows, []any{&class, &at, &overdue}, func() error {
			if at != nil {
				free[class] = *at
			}
			if overdue > 0 {
				due = append(due, class)
			}
			return nil
		})
	}
	if err != nil {
		s.log.Warn("read when sold-out classes free up; no sold-out hint is kept", "flight", flightID, "err", err)
		for _, c := range classes {
			free[c] = now
		}
	}
	for i, r := range results {
		var fe *fault.Error
		if errors.As(r.err, &fe) && fe.Code == fault.SoldOut {
			fe.FreeAt = free[calls[i].Req.FareClass]
			if slices.Contains(due, calls[i].Req.FareClass) {
				// Units come back as soon as these are expired.
				fe.FreeAt = now
			}
		}
	}
	return due
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
		if err := seatClassError(r, s, class[s]); err != nil {
			return err
		}
	}
	return seatsTaken(r)
}

// queuedError is the error of a hold of a class whose waitlist waits.
func queuedError(flightID int64, class string) error {
	return fault.New(fault.SoldOut, "fare class %s of flight %d is sold out: its waitlist is waiting", class, flightID)
}

// seatsTaken is the error of a request whose seats, all of its class, are
// not all free.
func seatsTaken(r HoldRequest) error {
	if len(r.Seats) == 1 {
		return fault.New(fault.SeatUnavailable, "seat %s is held or sold", r.Seats[0])
	}
	return fault.New(fault.SeatUnavailable, "seats %s: at least one is held or sold", strings.Join(r.Seats, ", "))
}

// seatClassError refuses a seat that does not exist (class "") or belongs
// to another class than the request's.
func seatClassError(r HoldRequest, seat, class string) error {
	switch {
	case class == "":
		return fault.Invalid("seats", "flight %d has no seat %s", r.FlightID, seat)
	case class != r.FareClass:
		return fault.Invalid("seats", "seat %s is in fare class %s, not %s", seat, class, r.FareClass)
	}
	return nil
}
