package pg

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
// to record their effect under it (QueueEffect).
func WithKeyClaim(ctx context.Context, c KeyClaim) context.Context {
	return context.WithValue(ctx, claimKey{}, c)
}

// KeyClaimOf returns the claim ctx carries, if any.
func KeyClaimOf(ctx context.Context) (KeyClaim, bool) {
	c, ok := ctx.Value(claimKey{}).(KeyClaim)
	return c, ok
}

// QueueEffect queues on batch, for a transaction that pipelines its
// statements, the record that the request of ctx's Idempotency-Key made
// effect (such as "booking:42"), so that the key is never run again once
// the transaction commits, even if its answer is then lost. Without a claim
// in ctx it queues nothing.
//
// Once the batch is closed without error, the function returned gives
// fault.IdempotencyKeyInUse, which must roll the transaction back, when the
// request no longer held its key (its lease ended and a retry took it
// over): the retry makes the effect, not both.
func QueueEffect(ctx context.Context, batch *pgx.Batch, effect string) func() error {
	c, ok := KeyClaimOf(ctx)
	if !ok {
		return func() error { return nil }
	}
	var recorded bool
	batch.Queue(`UPDATE idempotency_key SET effect = $4
		WHERE caller_id = $1 AND idem_key = $2 AND lease = $3 AND response_status IS NULL`,
		c.CallerID, c.Key, c.Lease, effect).Exec(func(tag pgconn.CommandTag) error {
		recorded = tag.RowsAffected() > 0
		return nil
	})
	return func() error {
		if !recorded {
			return KeyTakenOver()
		}
		return nil
	}
}

// KeyTakenOver is the error of a request that no longer holds its
// Idempotency-Key: a retry took it over and makes the effect instead.
func KeyTakenOver() error {
	return fault.New(fault.IdempotencyKeyInUse, "this request's Idempotency-Key was taken over by a retry")
}
