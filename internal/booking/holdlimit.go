package booking

import (
	"strconv"
	"time"

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

// Args are the limit as the SQL functions take it: p_limit and p_window.
// Off, it is as many holds as an int32 counts in a window of zero:
// hold_allowance then takes the customers' locks and reads nothing
// (migration 00029), so a customer's holds are still decided one after the
// other, which joining a waitlist relies on (flight.JoinWaitlist).
func (l HoldLimit) Args() (int32, pgtype.Interval) {
	if l.Off() {
		return 1<<31 - 1, pgtype.Interval{Valid: true}
	}
	return int32(min(l.N, 1<<30)), pgtype.Interval{Microseconds: l.Window.Microseconds(), Valid: true}
}

// Refused is the 429 rate_limited answer for a hold over the limit; secs
// is how long until the customer may hold again, in seconds, as the
// database gave it (the whole window if it cannot be read).
func (l HoldLimit) Refused(secs string) error {
	n, err := strconv.Atoi(secs)
	if err != nil {
		n = int(l.Window / time.Second)
	}
	e := fault.New(fault.RateLimited, "at most %d holds per %s; try again later", l.N, l.Window)
	e.RetryAfter = max(time.Duration(n)*time.Second, time.Second)
	return e
}
