package pg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/fault"
)

// KeyClaim is a request's hold on its Idempotency-Key: the caller, the key
// and the lease that says this request runs it.
type KeyClaim struct {
	CallerID int64
	Key      string
	Lease    string
}

type claimKey struct{}

// WithKeyClaim returns ctx carrying c, for the transactions of the request
// to record their effect under it (RecordEffect).
func WithKeyClaim(ctx context.Context, c KeyClaim) context.Context {
	return context.WithValue(ctx, claimKey{}, c)
}

// KeyClaimOf returns the claim ctx carries, if any.
func KeyClaimOf(ctx context.Context) (KeyClaim, bool) {
	c, ok := ctx.Value(claimKey{}).(KeyClaim)
	return c, ok
}

// RecordEffect records, in tx, that the request of ctx's Idempotency-Key
// made effect (such as "booking:42"), so that the key is never run again
// once tx commits, even if its answer is then lost. Without a claim in ctx
// it does nothing.
//
// Returns fault.IdempotencyKeyInUse, which rolls tx back, when the request
// no longer holds its key (its lease ended and a retry took it over): the
// retry makes the effect, not both.
func RecordEffect(ctx context.Context, tx pgx.Tx, effect string) error {
	c, ok := KeyClaimOf(ctx)
	if !ok {
		return nil
	}
	return RecordEffectOf(ctx, tx, c, effect)
}

// RecordEffectOf is RecordEffect for claim c (a transaction that serves
// several requests records each one's).
func RecordEffectOf(ctx context.Context, tx pgx.Tx, c KeyClaim, effect string) error {
	tag, err := tx.Exec(ctx, `UPDATE idempotency_key SET effect = $4
		WHERE caller_id = $1 AND idem_key = $2 AND lease = $3 AND response_status IS NULL`,
		c.CallerID, c.Key, c.Lease, effect)
	if err != nil {
		return fmt.Errorf("record the effect of idempotency key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return KeyTakenOver()
	}
	return nil
}

// KeyTakenOver is the error of a request that no longer holds its
// Idempotency-Key: a retry took it over and makes the effect instead.
func KeyTakenOver() error {
	return fault.New(fault.IdempotencyKeyInUse, "this request's Idempotency-Key was taken over by a retry")
}
