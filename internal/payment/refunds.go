package payment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/events"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
)

// Refunds is the consumer of refund.requested events: it records the refund
// against the charge it returns, in the consumer's transaction; Send then
// asks the gateway for it, outside any transaction (record, commit, call,
// record the outcome), so that a slow gateway holds up neither a
// transaction nor the other consumers' events. The gateway's
// idempotency key is derived from the event id, so an event delivered again
// (or retried after a timeout) never refunds twice; the refund.succeeded
// webhook completes it.
type Refunds struct{ s *Service }

var _ events.Consumer = (*Refunds)(nil)

// Refunds returns the refunds consumer.
func (s *Service) Refunds() *Refunds { return &Refunds{s: s} }

// Name identifies the consumer; it never changes.
func (*Refunds) Name() string { return "refunds" }

// Wants reports whether e is a refund request: the event relay hands this
// consumer nothing else (and records nothing for other events).
func (*Refunds) Wants(e events.Event) bool { return e.Type == outbox.RefundRequested }

// Handle records the refund one event asks for, within tx; events other
// than refund.requested are ignored. It does not call the gateway: Send
// does, after tx commits.
func (r *Refunds) Handle(ctx context.Context, tx pgx.Tx, e events.Event) error {
	if e.Type != outbox.RefundRequested {
		return nil
	}
	// The refund is the data's "refund" member, or the whole data in an
	// event of an earlier release (booking.RefundOf).
	raw, err := booking.RefundOf(e.Data)
	if err != nil {
		return fmt.Errorf("refund event %s: %w", e.ID, err)
	}
	var req RefundRequestedPayload
	if err := json.Unmarshal(raw, &req); err != nil {
		return fmt.Errorf("refund event %s: %w", e.ID, err)
	}
	if req.Amount <= 0 {
		return nil
	}
	s := r.s
	now := s.clock.Now()
	// The charge to refund: the one named, or else the one that confirmed
	// the booking (a cancellation).
	var (
		paymentID int64
		txn       string
	)
	q, arg := `SELECT id, provider_txn_id FROM payment WHERE provider_txn_id = $1`, any(req.ProviderTxnID)
	if req.ProviderTxnID == "" {
		q, arg = `SELECT id, provider_txn_id FROM payment WHERE booking_id = $1 AND outcome = 'confirmed'`, req.BookingID
	}
	err = tx.QueryRow(ctx, q, arg).Scan(&paymentID, &txn)
	if errors.Is(err, pgx.ErrNoRows) {
		// Nothing was paid through berth: there is nothing to give back,
		// and retrying would not change that.
		s.log.Error("refund requested for money berth never received", "event", e.ID, "booking", req.BookingID,
			"providerTxnId", req.ProviderTxnID, "amount", req.Amount)
		return nil
	}
	if err != nil {
		return fmt.Errorf("find the charge to refund for booking %d: %w", req.BookingID, err)
	}

	var (
		refundID  int64
		status    string
		gatewayID *string
	)
	err = tx.QueryRow(ctx, `INSERT INTO refund (event_id, payment_id, booking_id, amount, currency, reason, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT DO NOTHING
		RETURNING id, status, gateway_refund_id`,
		e.ID, paymentID, req.BookingID, req.Amount, req.Currency, req.Reason, now).Scan(&refundID, &status, &gatewayID)
	if errors.Is(err, pgx.ErrNoRows) {
		err = tx.QueryRow(ctx, `SELECT id, status, gateway_refund_id FROM refund WHERE event_id = $1`, e.ID).
			Scan(&refundID, &status, &gatewayID)
		if errors.Is(err, pgx.ErrNoRows) {
			// refund_payment_key: another event already refunds this
			// charge. A charge is refunded once, whatever asks again.
			s.log.Error("refund requested twice for one charge; the second is ignored", "event", e.ID,
				"booking", req.BookingID, "providerTxnId", txn)
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("record refund of booking %d: %w", req.BookingID, err)
	}
	// The gateway is asked by Send, after this transaction commits.
	return nil
}

// Gateway calls of the refund sender.
const (
	// refundClaim is how long a sender owns a refund it is asking the
	// gateway for; a sender that died lets another take it after.
	refundClaim = time.Minute
	// refundRetry is the pause before a refund the gateway refused is
	// asked for again.
	refundRetry = 2 * time.Second
	// refundBatch is the most refunds one Send asks for.
	refundBatch = 50
)

// Send asks the gateway for the refunds recorded but not yet sent, up to
// a bounded batch, outside any transaction: each is claimed (committed),
// sent, and its outcome recorded in a short transaction of its own. With
// retryNow it also sends those waiting out a pause after a failure. It
// returns how many the gateway took and the errors of the others, which
// are sent again later.
func (r *Refunds) Send(ctx context.Context, retryNow bool) (int, []error) {
	s := r.s
	type unsent struct {
		id, bookingID, amount  int64
		eventID, currency, txn string
	}
	rows, err := s.pool.Query(ctx, `UPDATE refund r SET next_attempt_at = now() + $1::interval
		FROM payment p
		WHERE r.id IN (SELECT id FROM refund
				WHERE status = 'REQUESTED' AND gateway_refund_id IS NULL
				  AND ($3 OR next_attempt_at IS NULL OR next_attempt_at <= now())
				ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
		  AND p.id = r.payment_id
		RETURNING r.id, r.event_id::text, r.booking_id, r.amount, r.currency, p.provider_txn_id`,
		refundClaim.String(), refundBatch, retryNow)
	if err != nil {
		return 0, []error{fmt.Errorf("claim refunds to send: %w", err)}
	}
	batch, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (unsent, error) {
		var u unsent
		err := row.Scan(&u.id, &u.eventID, &u.bookingID, &u.amount, &u.currency, &u.txn)
		return u, err
	})
	if err != nil {
		return 0, []error{fmt.Errorf("claim refunds to send: %w", err)}
	}
	n := 0
	var errs []error
	for _, u := range batch {
		if err := r.send(ctx, u.id, u.eventID, u.bookingID, u.amount, u.currency, u.txn); err != nil {
			errs = append(errs, err)
			// Let it be tried again soon rather than after the claim.
			if _, err := s.pool.Exec(ctx, `UPDATE refund SET next_attempt_at = now() + $2::interval WHERE id = $1`,
				u.id, refundRetry.String()); err != nil {
				s.log.Warn("reschedule refund", "refund", u.id, "err", err)
			}
			continue
		}
		n++
	}
	return n, errs
}

func (r *Refunds) send(ctx context.Context, id int64, eventID string, bookingID, amount int64, currency, txn string) error {
	s := r.s
	if *s.baseURL.Load() == "" {
		// Without it the gateway could never report the refund back. A
		// process that does not serve the API (berth worker) must be told.
		return fmt.Errorf("refund booking %d: BERTH_PUBLIC_URL is needed where berth does not serve the API, for the gateway's webhooks", bookingID)
	}
	res, err := s.gateway.Refund(ctx, "refund-"+eventID, GatewayRefundRequest{
		ProviderTxnID: txn, BookingID: bookingID, Amount: amount, Currency: currency, WebhookURL: s.WebhookURL(),
	})
	if err != nil {
		return fmt.Errorf("refund booking %d: %w", bookingID, err)
	}
	s.refunds.WithLabelValues("requested").Inc()
	return pg.InTx(ctx, s.pool, func(tx pgx.Tx) error { return r.link(ctx, tx, id, res.RefundID) })
}

// Run sends recorded refunds every interval until ctx ends, each pass
// bounded in refunds and time.
func (r *Refunds) Run(ctx context.Context, interval time.Duration) {
	clock.Every(ctx, interval, func() {
		passCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, errs := r.Send(passCtx, false)
		cancel()
		for _, err := range errs {
			if ctx.Err() == nil {
				r.s.log.Warn("send refund", "err", err)
			}
		}
	})
}

// link stores the gateway's id of refund id. If the refund.succeeded
// webhook came first, the refund is completed now: both sides upsert the
// gateway_refund row, so whichever commits second sees the other.
//
// Reports that came first are kept, each distinct one: if none is for the
// refund's money they are forgotten (and logged) instead, and the
// gateway's right report may still come and complete it.
func (r *Refunds) link(ctx context.Context, tx pgx.Tx, id int64, gatewayID string) error {
	want := refundMoney{id: id}
	err := tx.QueryRow(ctx, `UPDATE refund SET gateway_refund_id = $2 WHERE id = $1 RETURNING amount, currency`,
		id, gatewayID).Scan(&want.amount, &want.currency)
	if err != nil {
		return fmt.Errorf("store gateway id of refund %d: %w", id, err)
	}
	var (
		succeeded, matched bool
		amount             *int64
		currency           *string
	)
	err = tx.QueryRow(ctx, `INSERT INTO gateway_refund (gateway_refund_id, refund_id) VALUES ($1, $2)
		ON CONFLICT (gateway_refund_id) DO UPDATE SET refund_id = EXCLUDED.refund_id
		RETURNING succeeded_at IS NOT NULL,
			coalesce(reports @> jsonb_build_array(jsonb_build_object('amount', $3::bigint, 'currency', $4::text))
				OR (reports = '[]' AND amount = $3 AND currency = $4), false), -- recorded before reports were kept
			amount, currency`, gatewayID, id, want.amount, want.currency).Scan(&succeeded, &matched, &amount, &currency)
	if err != nil {
		return fmt.Errorf("link refund %d to %s: %w", id, gatewayID, err)
	}
	if !succeeded {
		return nil
	}
	if !matched {
		r.s.refundMismatch(want, gatewayID, deref(amount), deref(currency))
		return forgetRefundReport(ctx, tx, gatewayID)
	}
	return r.s.completeRefund(ctx, tx, id, r.s.clock.Now())
}

// deref is *p, or T's zero value for nil.
func deref[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}
