package booking

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/idempotency"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
)

// Answer is one row of what a hold function of the database (hold_flight,
// hold_car) answers for a batch: the request's ordinal Ord, from 1, and
// either an error Code with its Detail or the Booking made. A row with Ord
// 0 is a booking the batch changed on its way (hold_car's stale holds,
// Code "expired").
type Answer struct {
	Ord          int
	Code, Detail string
	Booking      *Booking
}

// HoldStatement is the statement that calls a hold function, call (such as
// "hold_car($1, $2)"), and returns its rows for ScanAnswers, in ordinal
// order. The functions write events, which the statement's text does not
// show: outbox.WritesMark says so, so that a hold sent on its own
// (committing by itself) wakes this process's relays at once.
func HoldStatement(call string) string {
	return outbox.WritesMark + `SELECT h.o_ord, h.o_code, h.o_detail, ` + Columns + `
	FROM ` + call + ` AS h
	CROSS JOIN LATERAL (SELECT (h.o_booking).*) AS x
	ORDER BY h.o_ord`
}

// Batcher is a pool, a connection or a transaction: a Querier that also
// sends batches.
type Batcher interface {
	Querier
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// KeyArgs returns the Idempotency-Key arguments of a hold function for
// requests under claims (the zero KeyClaim for a request without a key):
// their callers, keys and leases, NULL for a request without one.
func KeyArgs(claims []pg.KeyClaim) (callers []*int64, keys, leases []*string) {
	callers, keys, leases = make([]*int64, len(claims)), make([]*string, len(claims)), make([]*string, len(claims))
	for i := range claims {
		if c := &claims[i]; c.Key != "" {
			callers[i], keys[i], leases[i] = &c.CallerID, &c.Key, &c.Lease
		}
	}
	return callers, keys, leases
}

// QueryHold sends sql, a HoldStatement, with args, for requests under
// claims (KeyArgs), at now, and returns its answers to the requests in
// order and the rest (Requests). A request's answer with code "key_in_use"
// is one whose key it does not hold (pg.KeyClaim.Lost).
//
// The pending keys among claims are claimed in the same round trip and
// implicit transaction, just before the hold (idempotency.QueueClaims): a
// hold under a new key makes one round trip and one commit for both. A
// returned error means nothing was written.
func QueryHold(ctx context.Context, db Batcher, now time.Time, claims []pg.KeyClaim, sql string, args ...any) (requests, others []Answer, err error) {
	b := &pgx.Batch{}
	idempotency.QueueClaims(b, claims, now)
	var answers []Answer
	if b.Len() == 0 {
		answers, err = queryHold(ctx, db, sql, args)
	} else {
		b.Queue(sql, args...)
		answers, err = sendHold(ctx, db, b)
	}
	if err != nil {
		return nil, nil, err
	}
	return Requests(answers, len(claims))
}

// queryHold sends the hold statement sql with args on its own.
func queryHold(ctx context.Context, db Batcher, sql string, args []any) ([]Answer, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return ScanAnswers(rows)
}

// sendHold sends b, the claims and then a hold, and returns the hold's
// answers once the batch has committed (or, in a transaction, run).
func sendHold(ctx context.Context, db Batcher, b *pgx.Batch) ([]Answer, error) {
	br := db.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	answers, err := ScanAnswers(rows)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return answers, err
}

// ScanAnswers reads the rows of a HoldStatement and closes them.
func ScanAnswers(rows pgx.Rows) ([]Answer, error) {
	defer rows.Close()
	var answers []Answer
	for rows.Next() {
		var (
			a            Answer
			code, detail *string
		)
		if rows.RawValues()[3] != nil { // a booking's id
			b, err := Scan(prefixed{rows, []any{&a.Ord, &code, &detail}})
			if err != nil {
				return nil, err
			}
			a.Booking = b
		} else {
			dest := make([]any, len(rows.FieldDescriptions()))
			dest[0], dest[1], dest[2] = &a.Ord, &code, &detail
			if err := rows.Scan(dest...); err != nil {
				return nil, err
			}
		}
		a.Code, a.Detail = deref(code), deref(detail)
		answers = append(answers, a)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return answers, nil
}

// Requests returns, of answers, the n answers to requests 1 to n in order,
// and the rest (Ord 0); an error if they are not exactly that.
func Requests(answers []Answer, n int) (requests, others []Answer, err error) {
	for _, a := range answers {
		if a.Ord == 0 {
			others = append(others, a)
			continue
		}
		if a.Ord != len(requests)+1 {
			return nil, nil, fmt.Errorf("answer %d where %d was due, for %d requests", a.Ord, len(requests)+1, n)
		}
		requests = append(requests, a)
	}
	if len(requests) != n {
		return nil, nil, fmt.Errorf("%d answers for %d requests", len(requests), n)
	}
	return requests, others, nil
}

// prefixed scans a row whose first columns are before Columns into head.
type prefixed struct {
	rows pgx.Rows
	head []any
}

func (p prefixed) Scan(dest ...any) error {
	return p.rows.Scan(append(p.head, dest...)...)
}
