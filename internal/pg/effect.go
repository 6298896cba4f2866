package pg

import (
	"context"

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
// to record their effect under it (KeyClaimOf).
func WithKeyClaim(ctx context.Context, c KeyClaim) context.Context {
	return context.WithValue(ctx, claimKey{}, c)
}

// KeyClaimOf returns the claim ctx carries, if any.
func KeyClaimOf(ctx context.Context) (KeyClaim, bool) {
	c, ok := ctx.Value(claimKey{}).(KeyClaim)
	return c, ok
}

// KeyTakenOver is the error of a request that no longer holds its
// Idempotency-Key: a retry took it over and makes the effect instead.
func KeyTakenOver() error {
	return fault.New(fault.IdempotencyKeyInUse, "this request's Idempotency-Key was taken over by a retry")
}
