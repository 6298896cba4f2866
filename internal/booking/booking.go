// Package booking is what every kind of inventory shares: the statuses and
// their compare-and-set transitions, reads with access control, cancellation
// and hold expiry. What a booking holds (seats and fare counters, a car's
// calendar) is released or sold by the Inventory of its kind.
package booking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/policy"
)

// Kind is the kind of inventory a booking is for.
type Kind string

// The kinds of inventory.
const (
	KindFlight Kind = "flight"
	KindCar    Kind = "car"
)

// Status is where a booking is in its lifecycle.
type Status string

// The statuses, one vocabulary for every kind.
const (
	Held      Status = "HELD"
	Confirmed Status = "CONFIRMED"
	Expired   Status = "EXPIRED"
	Cancelled Status = "CANCELLED"
	OnTrip    Status = "ON_TRIP"
	Completed Status = "COMPLETED"
)

// Live reports whether a booking in status s occupies inventory.
func (s Status) Live() bool { return s == Held || s == Confirmed || s == OnTrip }

// Paid reports whether a booking in status s was paid for and stands
// (confirmed, or under way or done since).
func (s Status) Paid() bool { return s == Confirmed || s == OnTrip || s == Completed }

// Why a booking was cancelled.
const (
	ByCustomer    = "customer"
	ByHost        = "host"
	ByAdmin       = "admin"
	PaymentFailed = "payment_failed"
)

// Booking is one booking of any kind, as stored.
type Booking struct {
	ID            int64
	Kind          Kind
	Status        Status
	CustomerID    int64
	HostID        int64 // the car's host; 0 for flights
	Amount        int64
	Currency      string
	HoldExpiresAt time.Time
	// ExtendedAt is when the hold was extended (once at most: Extend);
	// zero while it was not.
	ExtendedAt time.Time
	// StartsAt is when the service starts (departure, pickup): refund rules
	// count back from it.
	StartsAt   time.Time
	RefundRule policy.Rule

	FlightID   int64
	FareClass  string
	FareBucket int16    // the fare counter row its units were taken from
	Seats      []string // sorted; empty for a quantity hold
	Quantity   int

	CancelReason string
	// RefundAmount is what a cancellation refunds (nil before one);
	// Returned is the money that arrived for the booking but did not
	// confirm it, owed back in full, in the booking's currency. The
	// booking shows them apart: refundAmount and returnedAmount (View).
	RefundAmount *int64
	Returned     int64
	// RefundStatus is REQUESTED while money is owed back to the customer
	// and SUCCEEDED once the gateway returned it; "" when nothing is owed.
	RefundStatus string
	Version      int
	CreatedAt    time.Time
	UpdatedAt    time.Time

	CarID int64
	// From and To are the rented period [From, To); StartsAt is From.
	From, To    time.Time
	RentalPrice int64
	// Zone is the UTC offset the client wrote its times in, which every
	// answer about the booking renders them in; nil renders in UTC.
	Zone *time.Location
}

// Columns is the select list that Scan reads, in order. Statements that
// return a booking use "RETURNING " + Columns.
const Columns = `id, kind, status, customer_id, host_id, amount, currency, refund_status, hold_expires_at, starts_at,
	refund_rule, flight_id, fare_class, seats, quantity, cancel_reason, refund_amount, version,
	created_at, updated_at, fare_bucket, car_id, lower(period), upper(period), rental_price, utc_offset, extended_at,
	refund_returned`

// Scan reads one row of Columns.
func Scan(row pgx.Row) (*Booking, error) {
	var (
		b            Booking
		refundStatus *string
		hostID       *int64
		flightID     *int64
		fareClass    *string
		quantity     *int
		cancelReason *string
		fareBucket   *int16
		rule         []byte
		carID        *int64
		from, to     *time.Time
		rentalPrice  *int64
		utcOffset    *int32
		extendedAt   *time.Time
	)
	err := row.Scan(&b.ID, &b.Kind, &b.Status, &b.CustomerID, &hostID, &b.Amount, &b.Currency, &refundStatus,
		&b.HoldExpiresAt, &b.StartsAt, &rule, &flightID, &fareClass, &b.Seats, &quantity,
		&cancelReason, &b.RefundAmount, &b.Version, &b.CreatedAt, &b.UpdatedAt, &fareBucket,
		&carID, &from, &to, &rentalPrice, &utcOffset, &extendedAt, &b.Returned)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(rule, &b.RefundRule); err != nil {
		return nil, fmt.Errorf("booking %d: refund rule: %w", b.ID, err)
	}
	b.RefundStatus = deref(refundStatus)
	b.HostID = deref(hostID)
	b.FlightID = deref(flightID)
	b.FareClass = deref(fareClass)
	b.Quantity = deref(quantity)
	b.CancelReason = deref(cancelReason)
	b.FareBucket = deref(fareBucket)
	b.CarID = deref(carID)
	b.From, b.To = deref(from), deref(to)
	b.RentalPrice = deref(rentalPrice)
	b.ExtendedAt = deref(extendedAt)
	if utcOffset != nil {
		b.Zone = time.FixedZone("", int(*utcOffset))
	}
	return &b, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// View is a booking as docs/api.md shows it, in clients' answers and in events.
type View struct {
	BookingID      int64      `json:"bookingId"`
	Kind           Kind       `json:"kind"`
	Status         Status     `json:"status"`
	CustomerID     int64      `json:"customerId"`
	Amount         int64      `json:"amount"`
	Currency       string     `json:"currency"`
	HoldExpiresAt  *time.Time `json:"holdExpiresAt,omitempty"`
	ExtendedAt     *time.Time `json:"extendedAt,omitempty"`
	FlightID       int64      `json:"flightId,omitempty"`
	FareClass      string     `json:"fareClass,omitempty"`
	Seats          []string   `json:"seats,omitempty"`
	Quantity       int        `json:"quantity,omitempty"`
	PaymentURL     string     `json:"paymentUrl,omitempty"`
	RefundAmount   *int64     `json:"refundAmount,omitempty"`
	ReturnedAmount *int64     `json:"returnedAmount,omitempty"`
	RefundStatus   string     `json:"refundStatus,omitempty"`
	CancelReason   string     `json:"cancelReason,omitempty"`
	CarID          int64      `json:"carId,omitempty"`
	From           *time.Time `json:"from,omitempty"`
	To             *time.Time `json:"to,omitempty"`
	Deposit        *int64     `json:"deposit,omitempty"`
	RentalPrice    *int64     `json:"rentalPrice,omitempty"`
	Version        int        `json:"version"`
	CreatedAt      time.Time  `json:"createdAt"`
	UpdatedAt      time.Time  `json:"updatedAt"`
}

// inZone formats t in RFC 3339 in b.Zone, as b's answers show its times.
func (b *Booking) inZone(t time.Time) string { return t.In(b.zone()).Format(time.RFC3339) }

// zone is where b's times are shown: b.Zone, UTC when it has none.
func (b *Booking) zone() *time.Location {
	if b.Zone == nil {
		return time.UTC
	}
	return b.Zone
}

// View returns b as docs/api.md shows it, its times in b.Zone.
func (b *Booking) View() View {
	zone := b.zone()
	v := View{
		BookingID:    b.ID,
		Kind:         b.Kind,
		Status:       b.Status,
		CustomerID:   b.CustomerID,
		Amount:       b.Amount,
		Currency:     b.Currency,
		RefundAmount: b.RefundAmount,
		RefundStatus: b.RefundStatus,
		CancelReason: b.CancelReason,
		Version:      b.Version,
		CreatedAt:    b.CreatedAt.In(zone),
		UpdatedAt:    b.UpdatedAt.In(zone),
	}
	if b.Returned > 0 {
		n := b.Returned
		v.ReturnedAmount = &n
	}
	if b.Status == Held {
		t := b.HoldExpiresAt.In(zone)
		v.HoldExpiresAt = &t
		v.PaymentURL = fmt.Sprintf("/bookings/%d/payments", b.ID)
	}
	if !b.ExtendedAt.IsZero() {
		t := b.ExtendedAt.In(zone)
		v.ExtendedAt = &t
	}
	if b.Kind == KindFlight {
		v.FlightID = b.FlightID
		v.FareClass = b.FareClass
		v.Seats = b.Seats
		v.Quantity = b.Quantity
	}
	if b.Kind == KindCar {
		from, to, deposit, price := b.From.In(zone), b.To.In(zone), b.Amount, b.RentalPrice
		v.CarID, v.From, v.To, v.Deposit, v.RentalPrice = b.CarID, &from, &to, &deposit, &price
	}
	return v
}

// reaches is the condition (on booking columns, with $2 the caller's
// role and $3 their id) that a booking is one the caller reaches in their
// role: a customer their own bookings, a host the bookings of their cars,
// an admin every booking. The same id under another role never widens a
// role (docs/api.md, "Bookings").
const reaches = `(($2 = 'admin') OR ($2 = 'customer' AND customer_id = $3) OR ($2 = 'host' AND host_id = $3))`

// AsOf returns b as it reads at now: a HELD booking whose hold has run
// out (hold_expires_at ≤ now) is EXPIRED from that instant, whether or not
// the sweeper has recorded it yet, since its seats are already on sale
// again. Its version and updatedAt stay those stored until the sweeper (or
// a hold that reclaims its seats) records the expiry. Every read of a
// booking goes through it; a booking in any other state is returned as it
// is.
func (b *Booking) AsOf(now time.Time) *Booking {
	if b.Status != Held || b.HoldExpiresAt.After(now) {
		return b
	}
	e := *b
	e.Status = Expired
	return &e
}

// Get returns booking id as it reads at now (AsOf) if caller reaches it in
// their role: its customer (customer token), the car's host (host token)
// or an admin. Returns fault.NotFound otherwise, never revealing that it
// exists.
func Get(ctx context.Context, db Querier, caller auth.Caller, id int64, now time.Time) (*Booking, error) {
	b, err := Scan(db.QueryRow(ctx, `SELECT `+Columns+` FROM booking
		WHERE id = $1 AND `+reaches, id, caller.Role, caller.ID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fault.New(fault.NotFound, "no booking %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get booking %d: %w", id, err)
	}
	return b.AsOf(now), nil
}

// List returns the bookings caller reaches in their role (a customer's
// own, a host's cars', every one for an admin) as they read at now
// (AsOf), newest first: at most limit, with ids below before when
// before > 0.
func List(ctx context.Context, db Querier, caller auth.Caller, now time.Time, limit int, before int64) ([]*Booking, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := db.Query(ctx, `SELECT `+Columns+` FROM booking
		WHERE id < $1 AND `+reaches+` ORDER BY id DESC LIMIT $4`, before, caller.Role, caller.ID, limit)
	if err != nil {
		return nil, fmt.Errorf("list bookings of %d: %w", caller.ID, err)
	}
	out, err := collectAsOf(rows, now)
	if err != nil {
		return nil, fmt.Errorf("list bookings of %d: %w", caller.ID, err)
	}
	return out, nil
}

// collectAsOf reads rows of Columns as they read at now (AsOf).
func collectAsOf(rows pgx.Rows, now time.Time) ([]*Booking, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Booking, error) {
		b, err := Scan(r)
		if err != nil {
			return nil, err
		}
		return b.AsOf(now), nil
	})
}

// Querier is a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// EffectOf names the booking id as the effect of a request under an
// Idempotency-Key (recorded by hold_flight and hold_car).
func EffectOf(id int64) string { return "booking:" + strconv.FormatInt(id, 10) }

// EffectBooking returns the booking id an effect names, if it names one.
func EffectBooking(effect string) (int64, bool) {
	s, ok := strings.CutPrefix(effect, "booking:")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil
}
