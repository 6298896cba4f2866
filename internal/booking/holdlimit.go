package booking

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"berth.dev/berth/internal/fault"
)

// HoldLimit is how many holds one customer may make per window
// (BERTH_HOLD_LIMIT, 3 per 15 minutes by default); N = 0 is no limit.
//
// The database decides it, in the hold's own transaction (the SQL function
// hold_allowance): a per-customer lock puts two holds of one customer one
// after the other, and the customer's bookings made within the window are
// counted. So it is exact across processes, and a hold costs no round trip
// besides its own. It counts holds that were made, not attempts: in a flash
// sale most attempts lose (seat taken, sold out), and counting them would
// lock out exactly the customers who keep trying.
type HoldLimit struct {
	N      int
	Window time.Duration
}

// Off reports whether there is no limit.
func (l HoldLimit) Off() bool { return l.N <= 0 || l.Window <= 0 }

// Args are the limit as the SQL functions take it: p_limit (0 when off) and
// p_window.
func (l HoldLimit) Args() (int32, pgtype.Interval) {
	if l.Off() {
		return 0, pgtype.Interval{Valid: true}
	}
	return int32(min(l.N, 1<<30)), pgtype.Interval{Microseconds: l.Window.Microseconds(), Valid: true}
}

// Refused is the 429 rate_limited answer for a hold over the limit; secs
// is how long until the customer may hold again, as the database gave it.
func (l HoldLimit) Refused(secs int) error {
	e := fault.New(fault.RateLimited, "at most %d holds per %s; try again later", l.N, l.Window)
	e.RetryAfter = max(time.Duration(secs)*time.Second, time.Second)
	return e
}

// Queue queues on batch, for a transaction that pipelines its statements,
// the database's answer how many more holds each of customers may make at
// now, taking the customers' hold-limit locks until the transaction ends
// (queue it before any other locking statement). The answer is in the
// Allowance returned once the batch is closed without error. With the
// limit off nothing is queued and every hold is allowed.
//
// A refusal is not returned by the batch itself: an error there makes pgx
// forget the statements it had prepared for the whole batch.
func (l HoldLimit) Queue(batch *pgx.Batch, customers []int64, now time.Time) *Allowance {
	a := &Allowance{l: l, left: make(map[int64]int, len(customers)), retry: make(map[int64]int, len(customers))}
	if l.Off() {
		return a
	}
	n, window := l.Args()
	batch.Queue(`SELECT o_customer, o_left, ceil(extract(epoch FROM o_retry))::integer
		FROM hold_allowance($1::bigint[], $2, $3, $4)`, customers, now, n, window).Query(func(rows pgx.Rows) error {
		var c int64
		var left, retry int
		_, err := pgx.ForEachRow(rows, []any{&c, &left, &retry}, func() error {
			a.left[c], a.retry[c] = left, retry
			return nil
		})
		if err != nil {
			return fmt.Errorf("hold limit of customers %v: %w", customers, err)
		}
		return nil
	})
	return a
}

// Allowance is how many holds each customer of a transaction may still
// make (HoldLimit.Queue).
type Allowance struct {
	l           HoldLimit
	left, retry map[int64]int
}

// Check returns l.Refused when customer has no hold left, else nil.
func (a *Allowance) Check(customer int64) error {
	if !a.l.Off() && a.left[customer] <= 0 {
		return a.l.Refused(a.retry[customer])
	}
	return nil
}

// Take counts a hold customer makes: only holds made count, not those
// refused for another reason.
func (a *Allowance) Take(customer int64) { a.left[customer]-- }
