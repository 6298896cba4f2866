package flight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/outbox"
)

// result is the outcome of one request of a batch.
type result struct {
	b   *booking.Booking
	err error
}

type seatRow struct {
	class     string
	status    string
	heldUntil *time.Time
}

// errQuotaRace is holdBatch's answer when a class's room, read without a
// lock, was taken by another transaction before the batch's counter update:
// the transaction must be rolled back and the batch tried again with the
// counters locked.
var errQuotaRace = errors.New("fare counters changed under the batch")

// holdBatch holds many validated requests for one flight in one
// transaction, each all or nothing, in the order given, and returns one
// result per request. A returned error means tx must be rolled back and
// nothing was held; errQuotaRace asks for another try with lockQuota, any
// other error for the requests one by one.
//
// It reads the flight's fares, the seats it needs under row locks (in seat
// order) and the fare buckets, decides every request against that state,
// and writes all bookings, seats, events and counters in one statement
// each: four round trips to the database in all, however many holds.
//
// The buckets are read without a lock unless lockQuota is set: the hot
// row is then locked only by the batch's last statement, a conditional
// increment, until commit, so that the next batch on the flight can do
// all its other work meanwhile. If that increment finds the room gone,
// holdBatch returns errQuotaRace. A request that fits the class but no
// single bucket needs share moved between buckets, which is done under
// the locks (they are then taken at once, in class and bucket order).
// Every write is conditional — a seat is set HELD only if it is free or
// its hold expired, a bucket's CHECK and the share-sum trigger stand under
// the counters — so a decision that disagreed with the database would fail
// the whole batch rather than sell anything twice.
func holdBatch(ctx context.Context, tx pgx.Tx, flightID int64, reqs []HoldRequest, now time.Time, ttl time.Duration, lockQuota bool) ([]result, error) {
	var classes, wanted []string
	for _, r := range reqs {
		if !slices.Contains(classes, r.FareClass) {
			classes = append(classes, r.FareClass)
		}
		wanted = append(wanted, r.Seats...)
	}
	slices.Sort(classes)
	slices.Sort(wanted)
	wanted = slices.Compact(wanted)

	// The reads go in one round trip, in lock order: the flight's fares
	// (no lock), the seats (seat order), the buckets (class, bucket order).
	// Seats of a request that turns out to be invalid are locked too; that
	// costs nothing but the lock.
	reads := &pgx.Batch{}
	reads.Queue(flightInfoSQL, flightID, classes)
	reads.Queue(lockSeatsSQL, flightID, wanted)
	if lockQuota {
		reads.Queue(lockBucketsSQL, flightID, classes)
	} else {
		reads.Queue(readBucketsSQL, flightID, classes)
	}
	br := tx.SendBatch(ctx, reads)
	rows, err := br.Query()
	info, infoErr := scanFlightInfo(flightID, rows, err)
	rows, err = br.Query()
	seats, seatsErr := scanSeats(flightID, rows, err)
	rows, err = br.Query()
	buckets, bucketsErr := scanBuckets(flightID, rows, err)
	if err := errors.Join(br.Close(), seatsErr, bucketsErr); err != nil {
		return nil, err
	}
	if fault.CodeOf(infoErr) != "" {
		results := make([]result, len(reqs))
		for i := range results {
			results[i].err = infoErr
		}
		return results, nil
	}
	if infoErr != nil {
		return nil, infoErr
	}

	results, plan, idx, moved := decide(reqs, info, seats, buckets, now, lockQuota)
	if moved {
		// A share must move between buckets: lock them all and decide again.
		rows, err := tx.Query(ctx, lockBucketsSQL, flightID, classes)
		if buckets, err = scanBuckets(flightID, rows, err); err != nil {
			return nil, err
		}
		lockQuota = true
		results, plan, idx, _ = decide(reqs, info, seats, buckets, now, lockQuota)
	}
	if len(plan) == 0 {
		return results, nil
	}

	bookings, err := insertBookings(ctx, tx, info, plan, now, ttl)
	if err != nil {
		return nil, err
	}
	var seatNos []string
	var owners []int64
	events := make([]outbox.Event, len(bookings))
	for k, b := range bookings {
		for _, s := range b.Seats {
			seatNos, owners = append(seatNos, s), append(owners, b.ID)
		}
		events[k] = outbox.Event{BookingID: b.ID, Type: outbox.BookingHeld, Data: b.View(), Time: now}
		results[idx[k]].b = b
	}
	// The writes that depend on the bookings' ids go in one round trip.
	writes := &pgx.Batch{}
	if len(seatNos) > 0 {
		// seat_no = ANY($2) lets the planner fetch just these seats by the
		// primary key, rather than every seat of the flight for a join.
		writes.Queue(`UPDATE seat s SET status = 'HELD', booking_id = u.booking_id, held_until = $3
			FROM unnest($2::text[], $4::bigint[]) AS u(seat_no, booking_id)
			WHERE s.flight_id = $1 AND s.seat_no = ANY($2) AND s.seat_no = u.seat_no
			  AND (s.status = 'AVAILABLE' OR (s.status = 'HELD' AND s.held_until <= $5))`,
			flightID, seatNos, bookings[0].HoldExpiresAt, owners, now)
	}
	sql, args, err := outbox.InsertMany(events)
	if err != nil {
		return nil, err
	}
	writes.Queue(sql, args...)
	var deltas []quotaDelta
	if lockQuota {
		sql, args = bucketsUpdate(flightID, buckets)
	} else {
		deltas = sumDeltas(plan)
		sql, args = bucketsIncrement(flightID, deltas)
	}
	writes.Queue(sql, args...)
	wr := tx.SendBatch(ctx, writes)
	err = func() error {
		if len(seatNos) > 0 {
			tag, err := wr.Exec()
			if err != nil {
				return fmt.Errorf("hold seats on flight %d: %w", flightID, err)
			}
			if int(tag.RowsAffected()) != len(seatNos) {
				return fmt.Errorf("hold seats on flight %d: %d of %d seats were free", flightID, tag.RowsAffected(), len(seatNos))
			}
		}
		if _, err := wr.Exec(); err != nil {
			return fmt.Errorf("write %d events: %w", len(events), err)
		}
		tag, err := wr.Exec()
		if err != nil {
			return fmt.Errorf("update quota on flight %d: %w", flightID, err)
		}
		if !lockQuota && int(tag.RowsAffected()) != len(deltas) {
			return errQuotaRace
		}
		return nil
	}()
	// The batch is closed either way; its own error counts only when the
	// statements went well.
	if closeErr := wr.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return nil, err
	}
	return results, nil
}

// lockSeatsSQL locks seats $2 of flight $1 in seat order (scanSeats reads
// its rows).
const lockSeatsSQL = `SELECT seat_no, fare_class, status, held_until FROM seat
	WHERE flight_id = $1 AND seat_no = ANY($2) ORDER BY seat_no FOR UPDATE`

// scanSeats reads the rows of lockSeatsSQL.
func scanSeats(flightID int64, rows pgx.Rows, err error) (map[string]seatRow, error) {
	if err != nil {
		return nil, fmt.Errorf("lock seats on flight %d: %w", flightID, err)
	}
	out := map[string]seatRow{}
	var no string
	var s seatRow
	_, err = pgx.ForEachRow(rows, []any{&no, &s.class, &s.status, &s.heldUntil}, func() error {
		out[no] = s
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lock seats on flight %d: %w", flightID, err)
	}
	return out, nil
}

// seatsFree decides whether every seat of r can be held now: it exists, is
// of r's class, is free (or its hold expired) and no earlier request of the
// batch took it.
func seatsFree(r HoldRequest, seats map[string]seatRow, claimed map[string]bool, now time.Time) error {
	for _, s := range r.Seats {
		if err := seatClassError(r, s, seats[s].class); err != nil {
			return err
		}
	}
	for _, s := range r.Seats {
		st := seats[s]
		free := st.status == "AVAILABLE" || (st.status == "HELD" && st.heldUntil != nil && !st.heldUntil.After(now))
		if !free || claimed[s] {
			return seatsTaken(r)
		}
	}
	return nil
}

// decide judges each request against the flight, the locked seats, the
// buckets and the requests before it, and returns the result of each
// (errors only; bookings come later), the holds to write and which request
// each serves. With locked buckets it may move share between them; without,
// a request that would need it stops the decision and moved is true.
func decide(reqs []HoldRequest, info *flightInfo, seats map[string]seatRow, buckets map[string][]bucket, now time.Time,
	locked bool) (results []result, plan []planned, idx []int, moved bool) {
	results = make([]result, len(reqs))
	claimed := map[string]bool{}
	for i := range reqs {
		r := reqs[i]
		if _, results[i].err = info.check(&r, now); results[i].err != nil {
			continue
		}
		if results[i].err = seatsFree(r, seats, claimed, now); results[i].err != nil {
			continue
		}
		bs := buckets[r.FareClass]
		target := roomiest(bs)
		if !locked && bucketRoom(bs, target) < r.Units() && classRoom(bs) >= r.Units() {
			return nil, nil, nil, true
		}
		if !allocate(bs, target, r.Units()) {
			results[i].err = soldOut(info.id, r.FareClass, r.Units())
			continue
		}
		for _, s := range r.Seats {
			claimed[s] = true
		}
		plan = append(plan, planned{req: r, fare: info.fares[r.FareClass], bucket: target})
		idx = append(idx, i)
	}
	return results, plan, idx, false
}
