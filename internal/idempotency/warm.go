package idempotency

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/pg"
)

// warmCaller is the caller of the warm-up's keys: no one's.
const warmCaller = 0

// Warm runs the statements of a hold under an Idempotency-Key once in tx,
// for a warm-up of a new connection (pg.WarmFunc): it runs hold with a
// context carrying a pending claim of a key of its own (so the hold's
// batch claims the key and records its effect under it, as a customer's
// does), reads the key back as a retry does, and stores an answer as a
// request does (AnswerPending); then the answer of a request that did not
// reach the database and the claim a request falls back to when its key
// was someone else's. Every request with a key runs some of these, and a
// backend's first claim (9–10 ms) costs about ten times its next
// (docs/surge.md).
//
// tx must be one that is rolled back (pg.RolledBack): nothing of it
// outlives the call. Warm reports whether hold succeeded and recorded its
// effect under the key, and every statement ran.
func Warm(ctx context.Context, tx pgx.Tx, now time.Time, hold func(ctx context.Context) bool) bool {
	// A key of its own, so that warm-ups of several connections or
	// processes never wait for one another on the key's index.
	q := NewRequest(warmCaller, "warm-up "+rand.Text(), http.MethodPost, "/bookings", nil)
	c := Pending(q)
	if !hold(pg.WithKeyClaim(ctx, c)) {
		return false
	}
	if k, err := readKey(ctx, tx, q); err != nil || k.effect == nil {
		return false
	}
	body := []byte(`{}`)
	if stored, err := answerKey(ctx, tx, q, c.Lease, http.StatusCreated, body, body); err != nil || !stored {
		return false
	}
	// The key is answered: a new key's answer and a claim find it taken.
	if stored, err := answerNewKey(ctx, tx, q, http.StatusCreated, body, body, now); err != nil || stored {
		return false
	}
	_, err := claimKey(ctx, tx, q, now)
	return errors.Is(err, pgx.ErrNoRows)
}
