package flight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
// flight share one transaction (see coalescer); otherwise, or when the
// shared transaction fails, the request gets a transaction of its own.
func (s *Service) Hold(ctx context.Context, r HoldRequest) (*booking.Booking, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if s.coalescer != nil {
		return s.coalescer.hold(ctx, r)
	}
	return s.holdAlone(ctx, r)
}

func (s *Service) holdAlone(ctx context.Context, r HoldRequest) (*booking.Booking, error) {
	var b *booking.Booking
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if b, err = HoldTx(ctx, tx, r, s.clock.Now(), s.holdTTL); err != nil {
			return err
		}
		return pg.RecordEffect(ctx, tx, booking.EffectOf(b.ID))
	})
	return b, err
}

// fareInfo is what a hold needs to know of a fare class, read without locks.
type fareInfo struct {
	price    int64
	currency string
	rule     string
	buckets  int
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
		(SELECT count(*) FROM fare_bucket b WHERE b.flight_id = f.id AND b.fare_class = fi.fare_class),
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
		buckets               int
		queued                bool
	)
	_, err = pgx.ForEachRow(rows, []any{&info.departure, &class, &price, &currency, &rule, &buckets, &queued}, func() error {
		found = true
		if class != nil {
			info.fares[*class] = fareInfo{price: *price, currency: *currency, rule: *rule, buckets: buckets, queued: queued}
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

// check refuses a request the flight cannot serve at all.
func (f *flightInfo) check(r *HoldRequest, now time.Time) (fareInfo, error) {
	fare, ok := f.fares[r.FareClass]
	switch {
	case !ok:
		return fare, fault.Invalid("fareClass", "flight %d has no fare class %s", f.id, r.FareClass)
	case !f.departure.After(now):
		return fare, fault.Invalid("flightId", "flight %d has departed", f.id)
	case fare.queued:
		return fare, fault.New(fault.SoldOut, "fare class %s of flight %d is sold out: its waitlist is waiting", r.FareClass, f.id)
	}
	return fare, nil
}

// HoldTx holds one validated request within tx, all or nothing, in a
// transaction of its own: every seat is held and the class quota reserved,
// or tx must be rolled back. This is the design every request pays when
// holds are not coalesced. The price is the server's: the fare's price
// times the units held.
//
// The hot fare counter is updated last, so its row lock is held only for
// the rest of the commit: seats (locked in seat order) and the booking row
// come first. Returns fault.ValidationFailed (unknown flight, class or
// seat; departed flight), fault.SeatUnavailable or fault.SoldOut.
func HoldTx(ctx context.Context, tx pgx.Tx, r HoldRequest, now time.Time, ttl time.Duration) (*booking.Booking, error) {
	info, err := loadFlight(ctx, tx, r.FlightID, []string{r.FareClass})
	if err != nil {
		return nil, err
	}
	fare, err := info.check(&r, now)
	if err != nil {
		return nil, err
	}
	b := chooseBucket(fare.buckets)
	ps := []planned{{req: r, fare: fare, bucket: b}}
	// Two pipelined round trips write the hold, in the lock order of
	// every transaction (booking row, seats by seat number, counter): the
	// booking and its seats, then its event and the counter, whose lock is
	// so held only until the commit. Each statement stays conditional and
	// is judged by its row count, as alone.
	insertSQL, insertArgs := insertBookingsSQL(info, ps, now, ttl)
	first := &pgx.Batch{}
	first.Queue(insertSQL, insertArgs...)
	if r.Seats != nil {
		first.Queue(holdSeatsSQL, r.FlightID, r.Seats, r.FareClass, holdExpiry(info, now, ttl), now)
	}
	bs, seatsHeld, err := sendFirst(ctx, tx, first, info, ps, r.Seats != nil)
	if err != nil {
		return nil, err
	}
	if r.Seats != nil && seatsHeld != len(r.Seats) {
		return nil, whySeatsUnavailable(ctx, tx, r)
	}
	second := &pgx.Batch{}
	if err := booking.Queue(second, bs[0], now); err != nil {
		return nil, err
	}
	second.Queue(takeQuotaSQL, r.FlightID, r.FareClass, b, r.Units())
	br := tx.SendBatch(ctx, second)
	_, err = br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("hold on flight %d: write event and reserve quota: %w", r.FlightID, err)
	}
	if tag.RowsAffected() != 1 {
		if err := moveQuota(ctx, tx, r.FlightID, r.FareClass, b, r.Units()); err != nil {
			return nil, err
		}
	}
	return bs[0], nil
}

// sendFirst sends a single hold's first pipeline: the booking's insert and,
// for a seat hold, the seats' update; it returns the booking and how many
// seats it took.
func sendFirst(ctx context.Context, tx pgx.Tx, batch *pgx.Batch, info *flightInfo, ps []planned, seats bool) ([]*booking.Booking, int, error) {
	br := tx.SendBatch(ctx, batch)
	bs, err := scanBookings(br.Query())
	if err == nil {
		err = checkOrder(bs, ps)
	}
	held := 0
	if err == nil && seats {
		var tag pgconn.CommandTag
		tag, err = br.Exec()
		held = int(tag.RowsAffected())
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, 0, fmt.Errorf("hold on flight %d: %w", info.id, err)
	}
	return bs, held, nil
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

// holdSeatsSQL takes every requested seat ($2, of class $3 on flight $1)
// for the booking this session inserted last, held until $4: a seat is
// taken only if it is available, or held by a hold expired at $5 (which
// need not wait for the sweeper). The rows are locked in seat order first.
// A single hold pipelines it right behind its booking's insert; fewer rows
// than seats means the hold fails.
const holdSeatsSQL = `WITH locked AS (
		SELECT seat_no FROM seat WHERE flight_id = $1 AND seat_no = ANY($2) ORDER BY seat_no FOR UPDATE)
	UPDATE seat s SET status = 'HELD', booking_id = currval(pg_get_serial_sequence('booking', 'id')), held_until = $4
	FROM locked l
	WHERE s.flight_id = $1 AND s.seat_no = l.seat_no AND s.fare_class = $3
	  AND (s.status = 'AVAILABLE' OR (s.status = 'HELD' AND s.held_until <= $5))`

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
