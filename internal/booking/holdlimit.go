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
// (queue it before any other locking statement). Once the batch is closed
// without error, the function returned answers each hold in the order the
// holds are decided: nil while its customer has a hold left (the call
// takes it), l.Refused when not. With the limit off nothing is queued and
// every hold is allowed.
//
// The refusal is not returned by the batch itself: an error there makes
// pgx forget the statements it had prepared for the whole batch.
func (l HoldLimit) Queue(batch *pgx.Batch, customers []int64, now time.Time) func(customer int64) error {
	if l.Off() {
		return func(int64) error { return nil }
	}
	n, window := l.Args()
	left := make(map[int64]int, len(customers))
	retry := make(map[int64]int, len(customers))
	batch.Queue(`SELECT o_customer, o_left, ceil(extract(epoch FROM o_retry))::integer
		FROM hold_allowance($1::bigint[], $2, $3, $4)`, customers, now, n, window).Query(func(rows pgx.Rows) error {
		var c int64
		var l, r int
		_, err := pgx.ForEachRow(rows, []any{&c, &l, &r}, func() error {
			left[c], retry[c] = l, r
			return nil
		})
		if err != nil {
			return fmt.Errorf("hold limit of customers %v: %w", customers, err)
		}
		return nil
	})
	return func(customer int64) error {
		if left[customer] <= 0 {
			return l.Refused(retry[customer])
		}
		left[customer]--
		return nil
	}
}
