package rental

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/idempotency"
	"berth.dev/berth/internal/pg"
)

// WarmSearch runs the load of a city's calendar once on a new connection,
// as pg.Warmer asks (pg.WarmFunc), so that the first load there does not
// pay for pgx's preparation of the statements (a round trip of its own),
// their planning and the backend's first reads of the car and booking
// catalogs. It loads a city no car is in, so it reads nothing and writes
// nothing. Reports false when the load failed, as on an unmigrated
// database. now is the server's clock.
func WarmSearch(ctx context.Context, c *pgx.Conn, now time.Time) bool {
	_, err := loadCity(ctx, c, "", now)
	return err == nil
}

// warmAhead is how far ahead of now the warm-up's hold is: a period no
// customer can hold yet, so that it meets no booking.
const warmAhead = 5 * 366 * 24 * time.Hour

// WarmHold runs the car hold path once on a new connection, as pg.Warmer
// asks: one hold, exactly as a customer's would be sent under an
// Idempotency-Key (idempotency.Warm: the key's claim pipelined with it, its
// read and answer after it; hold_car with the hold limit on and the key's
// effect, PL/pgSQL's compilation of it and the plans of its statements, the
// foreign-key and constraint checks its writes fire, and pgx's prepared
// statements), in a transaction that is rolled back (pg.RolledBack: nothing
// of it outlives the call, and it waits at most 100 ms for a lock). A
// backend's first call of hold_car costs about ten times its next
// (docs/cars.md). It takes any car no one has locked, for a day warmAhead
// from now, and reports false when it could not reach the writes: no car
// yet, a lock it would wait for, an error (an unmigrated database).
func WarmHold(ctx context.Context, c *pgx.Conn, now time.Time) bool {
	return pg.RolledBack(ctx, c, func(tx pgx.Tx) bool {
		var carID int64
		if err := tx.QueryRow(ctx, `SELECT id FROM car LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED`).Scan(&carID); err != nil {
			return false
		}
		from := now.Add(warmAhead).Truncate(time.Hour)
		return idempotency.Warm(ctx, tx, now, func(ctx context.Context) bool {
			// Customer 0 has no bookings, so the hold limit lets the hold through.
			cl := &call{Ctx: ctx, Req: HoldRequest{CarID: carID, From: from, To: from.Add(24 * time.Hour)}}
			_, err := holdBatch(ctx, tx, carID, []*call{cl}, now, time.Minute, booking.HoldLimit{N: 1, Window: time.Minute})
			return err == nil && cl.Err == nil
		})
	})
}
