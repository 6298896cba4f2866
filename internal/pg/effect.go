package pg

import (
	"context"
	"errors"
	"sync/atomic"

	"berth.dev/berth/internal/fault"
)

// KeyClaim is a request's hold on its Idempotency-Key: the caller, the key
// and the lease that says this request runs it.
type KeyClaim struct {
	CallerID int64
	Key      string
	Lease    string
	// Pending, when set, says the key is not claimed yet: the statement
	// that makes the request's effect claims it first, in its own
	// transaction (booking.QueryHold), so that a hold makes one round trip
	// and one commit for both.
	Pending *PendingClaim
}

// PendingClaim is what the claim of a pending key records, and whether a
// statement that claims it was sent (after which the key may be the
// request's).
type PendingClaim struct {
	Method, Path string
	Hash         []byte
	sent         atomic.Bool
}

// MarkSent notes that a statement claiming the key was sent.
func (p *PendingClaim) MarkSent() { p.sent.Store(true) }

// Sent reports whether a statement claiming the key was sent.
func (p *PendingClaim) Sent() bool { return p.sent.Load() }

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

// ErrKeyClaimed is the error of a request whose pending key was found
// claimed already, by an earlier request under it or one still running:
// the request made nothing, and is to be handled as one under a claimed
// key (a replay, 409 or 422).
var ErrKeyClaimed = errors.New("idempotency key already claimed")

// Lost is the error of a request whose statement found that it does not
// hold its key: ErrKeyClaimed for a pending claim, else KeyTakenOver.
func (c KeyClaim) Lost() error {
	if c.Pending != nil {
		return ErrKeyClaimed
	}
	return KeyTakenOver()
}

// KeyTakenOver is the error of a request that no longer holds its
// Idempotency-Key: a retry took it over and makes the effect instead.
func KeyTakenOver() error {
	return fault.New(fault.IdempotencyKeyInUse, "this request's Idempotency-Key was taken over by a retry")
}
