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
// flight share one statement (see coalescer); otherwise the request is a
// batch of one: the same statement, the same rules (holdBatch).
func (s *Service) Hold(ctx context.Context, r HoldRequest) (*booking.Booking, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if s.coalescer != nil {
		return s.coalescer.hold(ctx, r)
	}
	return s.holdAlone(ctx, r)
}

// holdAlone holds r as a batch of one.
func (s *Service) holdAlone(ctx context.Context, r HoldRequest) (*booking.Booking, error) {
	results, err := s.holdMany(ctx, r.FlightID, []*call{{ctx: ctx, req: r}})
	if err != nil {
		return nil, err
	}
	return results[0].b, results[0].err
}

// holdMany runs holdBatch on the pool, and again when PostgreSQL broke a
// deadlock by failing it (it locks in the order every transaction does,
// so this is the same safety net pg.InTx gives a transaction).
func (s *Service) holdMany(ctx context.Context, flightID int64, calls []*call) ([]result, error) {
	for attempt := 1; ; attempt++ {
		results, err := holdBatch(ctx, s.pool, flightID, calls, s.clock.Now(), s.holdTTL)
		state := pg.State(err)
		if err == nil || attempt == 3 || (state != pg.DeadlockDetected && state != pg.SerializationFailure) {
			return results, err
		}
	}
}

// fareInfo is what a hold needs to know of a fare class, read without locks.
type fareInfo struct {
	price    int64
	currency string
	rule     string
	// queued: the class's waitlist has WAITING entries, so whatever room
	// it has is kept for the line (an entry that does not fit yet), and
	// the class is sold out to anyone not in the line.
	queued bool
}

// flightInfo is a flight's departure and the fares a hold asked for.
type flightInfo struct {
	id        int64
	departure time.Time
	fares     map[string]fareInfo
}

// flightInfoSQL reads what holds on a flight ($1) need, for the fare
// classes $2 (scanFlightInfo reads its rows).
const flightInfoSQL = `SELECT f.departure_at, fi.fare_class, fi.price, fi.currency, fi.refund_rule::text,
		EXISTS (SELECT 1 FROM waitlist w WHERE w.flight_id = f.id AND w.fare_class = fi.fare_class AND w.status = 'WAITING')
	FROM flight f LEFT JOIN fare_inventory fi ON fi.flight_id = f.id AND fi.fare_class = ANY($2)
	WHERE f.id = $1`

// loadFlight reads what holds on flightID need. It returns
// fault.ValidationFailed for an unknown flight.
func loadFlight(ctx context.Context, tx pgx.Tx, flightID int64, classes []string) (*flightInfo, error) {
	rows, err := tx.Query(ctx, flightInfoSQL, flightID, classes)
	return scanFlightInfo(flightID, rows, err)
}

// scanFlightInfo reads the rows of flightInfoSQL.
func scanFlightInfo(flightID int64, rows pgx.Rows, err error) (*flightInfo, error) {
	if err != nil {
		return nil, fmt.Errorf("read flight %d: %w", flightID, err)
	}
	info := &flightInfo{id: flightID, fares: map[string]fareInfo{}}
	found := false
	var (
		class, currency, rule *string
		price                 *int64
		queued                bool
	)
	_, err = pgx.ForEachRow(rows, []any{&info.departure, &class, &price, &currency, &rule, &queued}, func() error {
		found = true
		if class != nil {
			info.fares[*class] = fareInfo{price: *price, currency: *currency, rule: *rule, queued: queued}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read flight %d: %w", flightID, err)
	}
	if !found {
		return nil, fault.Invalid("flightId", "no flight %d", flightID)
	}
	return info, nil
}

// check refuses a request the flight cannot serve at all, for a waitlist
// join (a hold is decided by hold_flight, see holdBatch).
func (f *flightInfo) check(r *HoldRequest, now time.Time) (fareInfo, error) {
	fare, ok := f.fares[r.FareClass]
	switch {
	case !ok:
		return fare, fault.Invalid("fareClass", "flight %d has no fare class %s", f.id, r.FareClass)
	case !f.departure.After(now):
		return fare, fault.Invalid("flightId", "flight %d has departed", f.id)
	case fare.queued:
		return fare, queuedError(f.id, r.FareClass)
	}
	return fare, nil
}

// planned is a hold that will be written: the request, its fare and the
// bucket its units come from.
type planned struct {
	req    HoldRequest
	fare   fareInfo
	bucket int16
}

// insertBookings inserts a HELD booking for each planned hold in one
// statement and returns them in the same order.
func insertBookings(ctx context.Context, tx pgx.Tx, info *flightInfo, ps []planned, now time.Time, ttl time.Duration) ([]*booking.Booking, error) {
	q, args := insertBookingsSQL(info, ps, now, ttl)
	out, err := scanBookings(tx.Query(ctx, q, args...))
	if err == nil {
		err = checkOrder(out, ps)
	}
	if err != nil {
		return nil, fmt.Errorf("insert bookings on flight %d: %w", info.id, err)
	}
	return out, nil
}

// holdExpiry is when a hold made at now ends: after ttl, or at departure.
func holdExpiry(info *flightInfo, now time.Time, ttl time.Duration) time.Time {
	expires := now.Add(ttl)
	if expires.After(info.departure) {
		expires = info.departure
	}
	return expires
}

// insertBookingsSQL is the statement inserting a HELD booking for each
// planned hold, returning them in the same order (scanBookings reads it).
func insertBookingsSQL(info *flightInfo, ps []planned, now time.Time, ttl time.Duration) (string, []any) {
	expires := holdExpiry(info, now, ttl)
	n := len(ps)
	var (
		customers = make([]int64, n)
		amounts   = make([]int64, n)
		currency  = make([]string, n)
		rules     = make([]string, n)
		classes   = make([]string, n)
		seats     = make([]*string, n)
		units     = make([]int, n)
		buckets   = make([]int16, n)
	)
	for i, p := range ps {
		customers[i], classes[i], units[i], buckets[i] = p.req.CustomerID, p.req.FareClass, p.req.Units(), p.bucket
		amounts[i], currency[i], rules[i] = p.fare.price*int64(p.req.Units()), p.fare.currency, p.fare.rule
		if p.req.Seats != nil {
			joined := strings.Join(p.req.Seats, ",")
			seats[i] = &joined
		}
	}
	return `INSERT INTO booking (kind, status, customer_id, amount, currency, hold_expires_at,
			starts_at, refund_rule, flight_id, fare_class, seats, quantity, fare_bucket, created_at, updated_at)
		SELECT 'flight', 'HELD', u.customer, u.amount, u.currency, $2, $3, u.rule::jsonb, $1, u.class,
			string_to_array(u.seats, ','), u.units, u.bucket, $4, $4
		FROM unnest($5::bigint[], $6::bigint[], $7::text[], $8::text[], $9::text[], $10::text[], $11::int[], $12::smallint[])
			WITH ORDINALITY AS u(customer, amount, currency, rule, class, seats, units, bucket, ord)
		ORDER BY u.ord
		RETURNING ` + booking.Columns,
		[]any{info.id, expires, info.departure, now, customers, amounts, currency, rules, classes, seats, units, buckets}
}

func scanBookings(rows pgx.Rows, err error) ([]*booking.Booking, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*booking.Booking, error) { return booking.Scan(r) })
}

// checkOrder checks that the inserted bookings come in the order of ps:
// rows come back in insertion order, which follows the SELECT's ORDER BY;
// check it rather than trust it, since the order pairs bookings with their
// requests.
func checkOrder(out []*booking.Booking, ps []planned) error {
	if len(out) != len(ps) {
		return fmt.Errorf("insert bookings: %d rows returned for %d holds", len(out), len(ps))
	}
	for i, b := range out {
		p := ps[i].req
		if b.CustomerID != p.CustomerID || b.FareClass != p.FareClass || b.Quantity != p.Units() || !slices.Equal(b.Seats, p.Seats) {
			return errors.New("insert bookings: rows returned out of order")
		}
	}
	return nil
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
