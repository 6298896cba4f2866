package payment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/events"
	"berth.dev/berth/internal/outbox"
)

// Refunds is the consumer of refund.requested events: it records the refund
// against the charge it returns and asks the gateway for it. The gateway's
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

// Handle processes one event within tx; events other than refund.requested
// are ignored. It returns an error (and the event is retried later) when the
// gateway cannot be reached.
func (r *Refunds) Handle(ctx context.Context, tx pgx.Tx, e events.Event) error {
	if e.Type != outbox.RefundRequested {
		return nil
	}
	var req RefundRequested
	if err := json.Unmarshal(e.Data, &req); err != nil {
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
	err := tx.QueryRow(ctx, q, arg).Scan(&paymentID, &txn)
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
	if status != "REQUESTED" {
		return nil
	}
	if *s.baseURL.Load() == "" {
		// Without it the gateway could never report the refund back. A
		// process that does not serve the API (berth worker) must be told.
		return fmt.Errorf("refund booking %d: BERTH_PUBLIC_URL is needed where berth does not serve the API, for the gateway's webhooks", req.BookingID)
	}
	res, err := s.gateway.Refund(ctx, "refund-"+e.ID, RefundRequest{
		ProviderTxnID: txn, BookingID: req.BookingID, Amount: req.Amount, Currency: req.Currency, WebhookURL: s.WebhookURL(),
	})
	if err != nil {
		return fmt.Errorf("refund booking %d: %w", req.BookingID, err)
	}
	s.refunds.WithLabelValues("requested").Inc()
	return r.link(ctx, tx, refundID, res.RefundID)
}

// link stores the gateway's id of refund id. If the refund.succeeded
// webhook came first, the refund is completed now: both sides upsert the
// gateway_refund row, so whichever commits second sees the other.
func (r *Refunds) link(ctx context.Context, tx pgx.Tx, id int64, gatewayID string) error {
	if _, err := tx.Exec(ctx, `UPDATE refund SET gateway_refund_id = $2 WHERE id = $1`, id, gatewayID); err != nil {
		return fmt.Errorf("store gateway id of refund %d: %w", id, err)
	}
	var succeeded bool
	err := tx.QueryRow(ctx, `INSERT INTO gateway_refund (gateway_refund_id, refund_id) VALUES ($1, $2)
		ON CONFLICT (gateway_refund_id) DO UPDATE SET refund_id = EXCLUDED.refund_id
		RETURNING succeeded_at IS NOT NULL`, gatewayID, id).Scan(&succeeded)
	if err != nil {
		return fmt.Errorf("link refund %d to %s: %w", id, gatewayID, err)
	}
	if !succeeded {
		return nil
	}
	return r.s.completeRefund(ctx, tx, id, r.s.clock.Now())
}
