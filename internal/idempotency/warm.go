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
// request does (AnswerPending); then the claim and the answer of a key
// claimed before its request runs (Claim, Settle), which a request falls
// back to when its key was someone else's. Every request with a key runs
// some of these, and a backend's first claim (9–10 ms) costs about ten
// times its next (docs/surge.md).
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
	var ours bool
	if err := tx.QueryRow(ctx, answerPendingSQL, q.Caller, q.Key, c.Lease, http.StatusCreated, []byte(`{}`), []byte(`{}`),
		q.Method, q.Path, q.Hash, now, now.Add(TTL)).Scan(&ours); err != nil || !ours {
		return false
	}
	// The key is answered: the claim finds it taken, and the answer
	// (under a lease that is over) stores nothing.
	if _, err := claimKey(ctx, tx, q, now); !errors.Is(err, pgx.ErrNoRows) {
		return false
	}
	_, err := tx.Exec(ctx, answerSQL, q.Caller, q.Key, c.Lease, http.StatusCreated, []byte(`{}`), []byte(`{}`))
	return err == nil
}
