package flight

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/idempotency"
	"berth.dev/berth/internal/pg"
)

// Warm runs the hold path once on a new connection, as pg.Warmer asks
// (pg.WarmFunc): one seat hold, exactly as a customer's would be sent under
// an Idempotency-Key (idempotency.Warm: the key's claim pipelined with it,
// its read and answer after it; hold_flight, its statements, the key's
// effect and the foreign-key checks its writes fire, and pgx's prepared
// statements), in a transaction that is rolled back (pg.RolledBack: nothing
// of it outlives the call, and it waits at most 100 ms for a lock). It
// takes any free seat of a flight not yet departed that no one has locked,
// and reports false when it could not reach the writes: no seat to take
// yet, a lock it would wait for, an error. Called on an unmigrated database
// it does nothing and reports false. now is the server's clock.
func Warm(ctx context.Context, c *pgx.Conn, now time.Time) bool {
	return pg.RolledBack(ctx, c, func(tx pgx.Tx) bool {
		var r HoldRequest
		var seat string
		err := tx.QueryRow(ctx, `SELECT s.flight_id, s.fare_class, s.seat_no
			FROM flight f CROSS JOIN LATERAL (
				SELECT st.flight_id, st.fare_class, st.seat_no FROM seat st
				WHERE st.flight_id = f.id AND st.status = 'AVAILABLE' LIMIT 1 FOR UPDATE SKIP LOCKED) AS s
			WHERE f.departure_at > $1 LIMIT 1`, now).Scan(&r.FlightID, &r.FareClass, &seat)
		if err != nil {
			return false
		}
		r.Seats = []string{seat}
		return idempotency.Warm(ctx, tx, now, func(ctx context.Context) bool {
			// A hold limit, so that its part of the path runs too (customer 0
			// has no bookings).
			results, err := holdBatch(ctx, tx, r.FlightID, []*call{{Ctx: ctx, Req: r}}, now, time.Minute,
				booking.HoldLimit{N: 1, Window: time.Minute}, false)
			return err == nil && len(results) == 1 && results[0].err == nil
		})
	})
}
