package booking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
)

// Inventory is what bookings of one kind hold, beyond their own row: seats
// and fare counters for flights; nothing for cars, whose calendar is the
// booking rows themselves. Every method runs in the caller's transaction,
// after the booking row was locked by its compare-and-set.
type Inventory interface {
	// Sell turns what a booking held into sold; b is now CONFIRMED. It
	// returns ErrIncomplete when part of the hold is gone, and the caller
	// must then roll back.
	Sell(ctx context.Context, tx pgx.Tx, b *Booking) error
	// Release gives back what b occupied in status was; b is no longer live.
	Release(ctx context.Context, tx pgx.Tx, b *Booking, was Status) error
}

// ErrIncomplete means a booking cannot be confirmed because part of what it
// held was taken by someone else after its hold expired (docs/invariants.md race 1).
var ErrIncomplete = errors.New("part of the hold is gone")

// Lifecycle moves bookings between statuses. Every move is a compare-and-set
// on the booking row that exactly one contender wins, the kind's inventory
// follows in the same transaction, and one outbox event records it.
type Lifecycle struct {
	Clock clock.Clock
	// PickupEarly is how long before a rental's start its host may hand
	// the car over (BERTH_PICKUP_EARLY).
	PickupEarly time.Duration
	// OnReleased, when set, is the one hook told after commit about every
	// booking that gave back what it held: cancelled (Cancel, or a failed
	// payment), expired (the sweeper's ExpireOne, or a car hold clearing
	// a stale hold in its way, in the database function hold_car). The
	// paths that commit here call it themselves; a caller that owns the
	// transaction or the statement (FailPayment, a car hold) calls
	// Released after its commit.
	OnReleased BookingReleased
	// RefundOnly writes refund.* events with the refund alone as their
	// data, as releases before the booking-shaped data did
	// (BERTH_REFUND_EVENT_DATA=refund): for a rolling upgrade from such a
	// release, whose refunds consumer reads only that shape
	// (WriteRefundEvent).
	RefundOnly  bool
	inventories map[Kind]Inventory
}

// WriteRefundEvent writes, within tx, the refund.* event typ of booking id
// (b, nil when there is no such booking) about refund at now. Its data is
// RefundEvent's, or the refund alone while RefundOnly is set. Every refund
// event is written here, so that both shapes are decided in one place.
func (l *Lifecycle) WriteRefundEvent(ctx context.Context, tx pgx.Tx, typ string, b *Booking, id int64, refund any, now time.Time) error {
	data := refund
	if !l.RefundOnly {
		data = RefundEvent(b, id, refund, now)
	}
	return outbox.Write(ctx, tx, outbox.Event{BookingID: id, Type: typ, Data: data, Time: now})
}

// BookingReleased is told that b, no longer live, gave back what it held;
// the release has committed.
type BookingReleased func(ctx context.Context, b *Booking)

// Released tells the OnReleased hook, if any, that b's release committed.
func (l *Lifecycle) Released(ctx context.Context, b *Booking) {
	if l.OnReleased != nil && b != nil {
		l.OnReleased(ctx, b)
	}
}

// DefaultPickupEarly is PickupEarly unless configured.
const DefaultPickupEarly = 2 * time.Hour

// NewLifecycle returns a lifecycle for the given inventories.
func NewLifecycle(c clock.Clock, inventories map[Kind]Inventory) *Lifecycle {
	return &Lifecycle{Clock: c, PickupEarly: DefaultPickupEarly, inventories: inventories}
}

func (l *Lifecycle) inventory(k Kind) (Inventory, error) {
	inv, ok := l.inventories[k]
	if !ok {
		return nil, fmt.Errorf("no inventory for bookings of kind %q", k)
	}
	return inv, nil
}

// EventType is the outbox event type of a booking entering status s.
func EventType(s Status) string {
	switch s {
	case Held:
		return outbox.BookingHeld
	case Confirmed:
		return outbox.BookingConfirmed
	case Expired:
		return outbox.BookingExpired
	case Cancelled:
		return outbox.BookingCancelled
	case OnTrip:
		return outbox.BookingOnTrip
	case Completed:
		return outbox.BookingCompleted
	}
	panic("booking: no event for status " + string(s))
}

// Record writes the event of b's current status to the outbox.
func Record(ctx context.Context, tx pgx.Tx, b *Booking, now time.Time) error {
	return outbox.Write(ctx, tx, outbox.Event{BookingID: b.ID, Type: EventType(b.Status), Data: b.View(), Time: now})
}

// RefundInstruction is the lifecycle's instruction to refund a cancelled
// booking: the refund of the refund.requested event Cancel writes (its
// data's "refund" member, RefundEventData), which the payment service's
// refunds consumer reads as payment.RefundRequestedPayload.
type RefundInstruction struct {
	BookingID int64  `json:"bookingId"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Reason    string `json:"reason"`
}

// Cancellation is what cancelling a booking now would do: who cancels it,
// and what it refunds by which rule. Cancel acts on it; a refund quote
// shows it, computed by the same function.
type Cancellation struct {
	Booking *Booking
	// Reason is the cancelReason it would record (customer, host, admin).
	Reason string
	// Refund is what goes back to the customer, in the booking's currency.
	Refund int64
	// Rule says why: "unpaid" (a HELD booking, nothing was paid),
	// "seller" (the host or an admin cancels: in full) or "policy" (the
	// booking's refund rule at this moment).
	Rule string
	// Percent is the share of the amount refunded.
	Percent int
	// AtLeast and LessThan bound, under RulePolicy, the notice the
	// cancellation gives (the rule's tiers, policy.Rule.Window); -1 where
	// no tier bounds it, and under the other rules.
	AtLeast, LessThan time.Duration
	At                time.Time
}

// The rules a Cancellation names.
const (
	RuleUnpaid = "unpaid"
	RuleSeller = "seller"
	RulePolicy = "policy"
)

// cancellation decides what cancelling b at now by caller does: HELD →
// nothing to refund; CONFIRMED → by the booking's rule, or in full when the
// host or an admin cancels someone else's booking. Returns
// fault.InvalidState for any other status.
func cancellation(b *Booking, caller auth.Caller, now time.Time) (Cancellation, error) {
	c := Cancellation{Booking: b, Reason: ByCustomer, At: now, AtLeast: -1, LessThan: -1}
	// The role decides: a customer token is the customer even when its
	// id is also the car's host's.
	switch {
	case caller.Admin():
		c.Reason = ByAdmin
	case caller.Host() && b.HostID != 0 && caller.ID == b.HostID:
		c.Reason = ByHost
	case !caller.Customer() || caller.ID != b.CustomerID:
		return c, fault.New(fault.NotFound, "no booking %d", b.ID)
	}
	// A host or an admin cancelling their own booking as a customer is
	// that customer: another role is no way around their refund rule.
	if caller.ID == b.CustomerID {
		c.Reason = ByCustomer
	}
	switch b.Status {
	case Held:
		c.Rule = RuleUnpaid
	case Confirmed:
		c.Rule, c.Refund, c.Percent = RuleSeller, b.Amount, 100
		if c.Reason == ByCustomer {
			c.Rule = RulePolicy
			c.Percent = b.RefundRule.Percent(b.StartsAt, now)
			c.Refund = b.RefundRule.Refund(b.Amount, b.StartsAt, now)
			c.AtLeast, c.LessThan = b.RefundRule.Window(b.StartsAt, now)
		}
	default:
		return c, fault.New(fault.InvalidState, "a booking that is %s cannot be cancelled", b.Status)
	}
	return c, nil
}

// Quote returns what cancelling booking id now would do for caller, by the
// very rule Cancel applies, without changing anything.
//
// Returns fault.NotFound if caller may not see the booking, fault.InvalidState
// if it cannot be cancelled.
func (l *Lifecycle) Quote(ctx context.Context, db Querier, caller auth.Caller, id int64) (Cancellation, error) {
	now := l.Clock.Now()
	b, err := Get(ctx, db, caller, id, now)
	if err != nil {
		return Cancellation{}, err
	}
	return cancellation(b, caller, now)
}

// Cancel cancels booking id for caller: HELD → CANCELLED releases at once
// (nothing was paid; a hold that ran out is EXPIRED, see AsOf, and cannot
// be cancelled); CONFIRMED → CANCELLED also refunds by the booking's
// rule, or in full when the host or an admin cancels. The refund is computed
// with the server's clock, at the moment of the compare-and-set.
//
// Returns fault.NotFound if caller may not see the booking, fault.InvalidState
// if it is in any other status.
func (l *Lifecycle) Cancel(ctx context.Context, db pg.Beginner, caller auth.Caller, id int64) (*Booking, error) {
	var out *Booking
	err := pg.InTx(ctx, db, func(tx pgx.Tx) error {
		now := l.Clock.Now()
		// A change that committed between the read and the compare-and-set
		// (a confirmation, say) is no reason to refuse: the booking is read
		// again, each statement seeing what committed before it, and the
		// cancellation decided on it as it now is, a few times at most.
		for range 3 {
			b, err := Get(ctx, tx, caller, id, now)
			if err != nil {
				return err
			}
			c, err := cancellation(b, caller, now)
			if err != nil {
				return err
			}
			out, err = l.leave(ctx, tx, b, Cancelled, c.At, c.Reason, &c.Refund)
			if !errors.Is(err, errLostRace) {
				return err
			}
		}
		return fault.New(fault.InvalidState, "booking %d kept changing while it was being cancelled", id)
	})
	if err != nil {
		return nil, err
	}
	l.Released(ctx, out)
	return out, nil
}

var errLostRace = errors.New("booking changed concurrently")

// leave moves b out of a live status to one that is not, releases its
// inventory and records the event (and a refund request when one is due).
// It returns errLostRace when b was no longer in b.Status.
func (l *Lifecycle) leave(ctx context.Context, tx pgx.Tx, b *Booking, to Status, now time.Time, reason string, refund *int64) (*Booking, error) {
	var cancelReason *string
	if to == Cancelled {
		cancelReason = &reason
	}
	nb, err := Scan(tx.QueryRow(ctx, `UPDATE booking
		SET status = $3, cancel_reason = $4, refund_amount = $5, version = version + 1, updated_at = $6,
			refund_status = CASE WHEN $5::bigint > 0 THEN 'REQUESTED' ELSE refund_status END
		WHERE id = $1 AND status = $2
		RETURNING `+Columns, b.ID, b.Status, to, cancelReason, refund, now))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errLostRace
	}
	if err != nil {
		return nil, fmt.Errorf("move booking %d from %s to %s: %w", b.ID, b.Status, to, err)
	}
	if err := l.release(ctx, tx, nb, b.Status); err != nil {
		return nil, err
	}
	if err := Record(ctx, tx, nb, now); err != nil {
		return nil, err
	}
	if refund != nil && *refund > 0 {
		// The booking as booking.cancelled carries it, with the refund.
		r := RefundInstruction{BookingID: nb.ID, Amount: *refund, Currency: nb.Currency, Reason: "cancelled_by_" + reason}
		if err := l.WriteRefundEvent(ctx, tx, outbox.RefundRequested, nb, nb.ID, r, now); err != nil {
			return nil, err
		}
	}
	return nb, nil
}

func (l *Lifecycle) release(ctx context.Context, tx pgx.Tx, b *Booking, was Status) error {
	inv, err := l.inventory(b.Kind)
	if err != nil {
		return err
	}
	if err := inv.Release(ctx, tx, b, was); err != nil {
		return fmt.Errorf("release booking %d: %w", b.ID, err)
	}
	return nil
}

// ExpireOne expires the most overdue HELD booking that no other transaction
// has locked, releases what it held and records the event. It reports false
// when no booking is due. Several sweepers may run it at once: SKIP LOCKED
// hands each a different booking, and the status condition lets exactly one
// transaction move any booking.
func (l *Lifecycle) ExpireOne(ctx context.Context, db pg.Beginner) (bool, error) {
	return l.expireOne(ctx, db, "")
}

// ExpireOneOf is ExpireOne among the bookings of classes of flight: a hold
// that finds a class sold out ends its overdue holds itself, rather than
// wait for the sweeper, since every read already shows their units free.
func (l *Lifecycle) ExpireOneOf(ctx context.Context, db pg.Beginner, flight int64, classes []string) (bool, error) {
	return l.expireOne(ctx, db, "AND flight_id = $2 AND fare_class = ANY ($3)", flight, classes)
}

// expireOne expires the most overdue HELD booking that also meets scope (a
// condition on $2, $3… bound to args).
func (l *Lifecycle) expireOne(ctx context.Context, db pg.Beginner, scope string, args ...any) (bool, error) {
	var expired *Booking
	err := pg.InTx(ctx, db, func(tx pgx.Tx) error {
		expired = nil
		now := l.Clock.Now()
		b, err := Scan(tx.QueryRow(ctx, `UPDATE booking
			SET status = 'EXPIRED', version = version + 1, updated_at = $1
			WHERE id = (SELECT id FROM booking WHERE status = 'HELD' AND hold_expires_at <= $1 `+scope+`
			            ORDER BY hold_expires_at LIMIT 1 FOR UPDATE SKIP LOCKED)
			  AND status = 'HELD'
			RETURNING `+Columns, append([]any{now}, args...)...))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("expire a hold: %w", err)
		}
		if err := l.expired(ctx, tx, b, now); err != nil {
			return err
		}
		expired = b
		return nil
	})
	if err != nil {
		return false, err
	}
	l.Released(ctx, expired)
	return expired != nil, nil
}

// expired releases what b held and records that it expired.
func (l *Lifecycle) expired(ctx context.Context, tx pgx.Tx, b *Booking, now time.Time) error {
	if err := l.release(ctx, tx, b, Held); err != nil {
		return err
	}
	return Record(ctx, tx, b, now)
}

// Confirm moves a HELD booking to CONFIRMED because a charge of amount in
// currency succeeded, within the caller's transaction (which also records
// the payment). It succeeds only if the hold has not expired, the money
// matches the booking, and the whole hold is still there (docs/invariants.md
// races 1 and 4). Otherwise it returns a fault (HoldExpired, InvalidState,
// ValidationFailed for a wrong amount) or ErrIncomplete, and the caller
// must roll back whatever it did in tx and refund the money instead.
func (l *Lifecycle) Confirm(ctx context.Context, tx pgx.Tx, id, amount int64, currency string) (*Booking, error) {
	now := l.Clock.Now()
	b, err := Scan(tx.QueryRow(ctx, `UPDATE booking
		SET status = 'CONFIRMED', version = version + 1, updated_at = $2
		WHERE id = $1 AND status = 'HELD' AND hold_expires_at > $2 AND amount = $3 AND currency = $4
		RETURNING `+Columns, id, now, amount, currency))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, l.whyNotConfirmed(ctx, tx, id, amount, currency, now)
	}
	if err != nil {
		return nil, fmt.Errorf("confirm booking %d: %w", id, err)
	}
	inv, err := l.inventory(b.Kind)
	if err != nil {
		return nil, err
	}
	if err := inv.Sell(ctx, tx, b); err != nil {
		return nil, fmt.Errorf("sell booking %d: %w", id, err)
	}
	if err := Record(ctx, tx, b, now); err != nil {
		return nil, err
	}
	return b, nil
}

func (l *Lifecycle) whyNotConfirmed(ctx context.Context, tx pgx.Tx, id, amount int64, currency string, now time.Time) error {
	var (
		status  Status
		expires time.Time
		want    int64
		cur     string
	)
	err := tx.QueryRow(ctx, `SELECT status, hold_expires_at, amount, currency FROM booking WHERE id = $1`, id).
		Scan(&status, &expires, &want, &cur)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fault.New(fault.NotFound, "no booking %d", id)
	case err != nil:
		return fmt.Errorf("confirm booking %d: %w", id, err)
	case status != Held:
		return fault.New(fault.InvalidState, "booking %d is %s", id, status)
	case !expires.After(now):
		return fault.New(fault.HoldExpired, "the hold of booking %d expired at %s", id, expires.UTC().Format(time.RFC3339))
	case want != amount || cur != currency:
		return fault.New(fault.ValidationFailed, "booking %d costs %d %s, not %d %s", id, want, cur, amount, currency)
	}
	return fmt.Errorf("confirm booking %d: no row matched and no reason found", id)
}

// FailPayment releases a HELD booking at once because its charge failed, so
// its seats go back on sale: it becomes CANCELLED with reason payment_failed.
// It reports false, and changes nothing, when the booking is no longer HELD.
// The caller calls Released with the booking once tx has committed. Like
// every cancellation it shows what it refunds: nothing (a HELD booking was
// not paid for; money that arrived and did not confirm it is refunded as
// such).
func (l *Lifecycle) FailPayment(ctx context.Context, tx pgx.Tx, id int64) (*Booking, bool, error) {
	b := &Booking{ID: id, Status: Held}
	var none int64
	nb, err := l.leave(ctx, tx, b, Cancelled, l.Clock.Now(), PaymentFailed, &none)
	if errors.Is(err, errLostRace) {
		return nil, false, nil
	}
	return nb, err == nil, err
}

// Move performs a car's hand-over transitions, CONFIRMED → ON_TRIP (pickup)
// and ON_TRIP → COMPLETED (return), for caller, who must be the car's host
// (host token) or an admin. Pickup is allowed only from the rental's start
// less PickupEarly until its end; return only after pickup. The window is
// part of the compare-and-set, so the database decides with the server's
// clock.
//
// Returns fault.NotFound, fault.Forbidden or fault.InvalidState (outside
// the window too, changing nothing).
func (l *Lifecycle) Move(ctx context.Context, db pg.Beginner, caller auth.Caller, id int64, from, to Status) (*Booking, error) {
	var out *Booking
	err := pg.InTx(ctx, db, func(tx pgx.Tx) error {
		now := l.Clock.Now()
		b, err := Get(ctx, tx, caller, id, now)
		if err != nil {
			return err
		}
		if !caller.Admin() && (!caller.Host() || b.HostID == 0 || b.HostID != caller.ID) {
			return fault.New(fault.Forbidden, "only the car's host or an admin may do this")
		}
		if b.Kind != KindCar || b.Status != from {
			return fault.New(fault.InvalidState, "a %s booking that is %s cannot become %s", b.Kind, b.Status, to)
		}
		if to == OnTrip && (now.Before(b.From.Add(-l.PickupEarly)) || !now.Before(b.To)) {
			// In the booking's own zone, as its answers show its period
			// (the host reads it beside the booking), not in UTC; and as
			// members of the problem, for a client to say it its own way.
			opens, closes := b.inZone(b.From.Add(-l.PickupEarly)), b.inZone(b.To)
			return &fault.Error{Code: fault.InvalidState,
				Detail: fmt.Sprintf("the car can be picked up only from %s until %s", opens, closes),
				Extra:  map[string]any{"pickupFrom": opens, "pickupUntil": closes}}
		}
		if !to.Live() {
			out, err = l.leave(ctx, tx, b, to, now, "", nil)
		} else {
			// The window again, in the compare-and-set itself.
			out, err = Scan(tx.QueryRow(ctx, `UPDATE booking SET status = $3, version = version + 1, updated_at = $4
				WHERE id = $1 AND status = $2
					AND ($3 <> 'ON_TRIP' OR ($4 >= lower(period) - $5 * interval '1 microsecond' AND $4 < upper(period)))
				RETURNING `+Columns, id, from, to, now, l.PickupEarly.Microseconds()))
			if errors.Is(err, pgx.ErrNoRows) {
				err = errLostRace
			}
			if err == nil {
				err = Record(ctx, tx, out, now)
			}
		}
		if errors.Is(err, errLostRace) {
			return fault.New(fault.InvalidState, "booking %d changed concurrently", id)
		}
		return err
	})
	return out, err
}
