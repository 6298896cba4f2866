package idempotency

import (
	"context"
	"crypto/rand"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/pg"
)

// warmCaller is the caller of the warm-up's keys: no one's.
const warmCaller = 0

// Warm runs the statements of a hold under an Idempotency-Key once in tx,
// for a warm-up of a new connection (pg.WarmFunc): it claims a key of its
// own as Claim does, runs hold with a context carrying the claim (so the
// hold's transaction records its effect under the key, as a customer's
// does), reads the key back as a retry's Claim does and stores an answer
// as Settle does. Every request with a key runs these, and a backend's
// first claim (9–10 ms) costs about ten times its next (docs/surge.md).
//
// tx must be one that is rolled back (pg.RolledBack): nothing of it
// outlives the call. Warm reports whether hold succeeded and recorded its
// effect under the key, and every statement ran.
func Warm(ctx context.Context, tx pgx.Tx, now time.Time, hold func(ctx context.Context) bool) bool {
	// A key of its own, so that warm-ups of several connections or
	// processes never wait for one another on the key's index.
	q := NewRequest(warmCaller, "warm-up "+rand.Text(), http.MethodPost, "/bookings", nil)
	lease, err := claimKey(ctx, tx, q, now)
	if err != nil {
		return false
	}
	if !hold(pg.WithKeyClaim(ctx, pg.KeyClaim{CallerID: q.Caller, Key: q.Key, Lease: lease})) {
		return false
	}
	if k, err := readKey(ctx, tx, q); err != nil || k.effect == nil {
		return false
	}
	tag, err := tx.Exec(ctx, answerSQL, q.Caller, q.Key, lease, http.StatusCreated, []byte(`{}`), []byte(`{}`))
	return err == nil && tag.RowsAffected() == 1
}
