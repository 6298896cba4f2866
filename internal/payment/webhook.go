package payment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/money"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/text"
)

// Why money that arrived is refunded instead of confirming its booking
// (payment.reason).
const (
	ReasonLate             = "late"              // the hold had expired
	ReasonWrongAmount      = "wrong_amount"      // not the booking's amount
	ReasonWrongCurrency    = "wrong_currency"    // not the booking's currency
	ReasonUnknownBooking   = "unknown_booking"   // no such booking
	ReasonAlreadyConfirmed = "already_confirmed" // another charge confirmed it
	ReasonNotHeld          = "not_held"          // cancelled, or otherwise not payable
	ReasonSeatGone         = "seat_gone"         // part of the hold was reclaimed (docs/invariants.md race 1)
	ReasonNotOurCharge     = "not_our_charge"    // not the charge berth started for that booking
)

// RefundRequestedPayload is the refund of a refund.requested event (the
// "refund" member of its data, booking.RefundEventData), as the webhook
// writes it and the refunds consumer reads it. Lifecycle.Cancel writes
// booking.RefundInstruction (the same fields but ProviderTxnID) for a
// confirmed booking's cancellation; the refund then ties to the charge
// that confirmed the booking.
type RefundRequestedPayload struct {
	BookingID     int64  `json:"bookingId"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	Reason        string `json:"reason"`
	ProviderTxnID string `json:"providerTxnId,omitempty"`
}

// RefundCompleted is the refund of a refund.completed event (the "refund"
// member of its data, booking.RefundEventData).
type RefundCompleted struct {
	RefundID        int64  `json:"refundId"`
	BookingID       int64  `json:"bookingId"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
	ProviderTxnID   string `json:"providerTxnId"`
	GatewayRefundID string `json:"gatewayRefundId"`
}

// HandleWebhook verifies and processes one webhook delivery. It returns nil
// for every validly signed delivery, duplicates and unknown event types
// included (docs/api.md: the gateway retries anything else), and
// fault.Unauthenticated for a bad signature or timestamp. A signed body it
// cannot read or act on is logged as an error and counted for operators to
// take up with the gateway: asking the gateway to send it again would not
// make it readable. Another error means processing failed and the gateway
// should retry.
func (s *Service) HandleWebhook(ctx context.Context, h http.Header, body []byte) error {
	if err := Verify(s.webhookKey, h, body, s.clock.Now()); err != nil {
		return err
	}
	var w Webhook
	if err := json.Unmarshal(body, &w); err != nil {
		return s.unprocessable("", "", fmt.Errorf("the body is not the expected JSON: %w", err))
	}
	d := w.Data
	switch w.Type {
	case ChargeSucceeded, ChargeFailed, RefundSucceeded:
	default:
		// Newer event types are no reason for the gateway to retry.
		s.webhooks.WithLabelValues("other", "ignored").Inc()
		s.log.Info("ignored webhook", "type", w.Type)
		return nil
	}
	switch {
	case d.ProviderTxnID == "" || text.Check(d.ProviderTxnID, 255) != nil:
		// Logged quoted (%q) below: the id is not fit to print as it is.
		return s.unprocessable(w.Type, fmt.Sprintf("%q", d.ProviderTxnID), errors.New("data.providerTxnId must be 1 to 255 characters of text"))
	case d.Amount < 0:
		return s.unprocessable(w.Type, d.ProviderTxnID, errors.New("data.amount must not be negative"))
	case !money.Known(d.Currency) && w.Type != ChargeFailed:
		return s.unprocessable(w.Type, d.ProviderTxnID, errors.New("data.currency must be an ISO 4217 code"))
	}
	var (
		result string
		err    error
	)
	switch w.Type {
	case ChargeSucceeded:
		result, err = s.chargeSucceeded(ctx, d)
	case ChargeFailed:
		result, err = s.chargeFailed(ctx, d)
	case RefundSucceeded:
		result, err = s.refundSucceeded(ctx, d)
	}
	if err != nil {
		return fmt.Errorf("webhook %s %s: %w", w.Type, d.ProviderTxnID, err)
	}
	s.webhooks.WithLabelValues(w.Type, result).Inc()
	s.log.Debug("webhook", "type", w.Type, "txn", d.ProviderTxnID, "booking", d.BookingID, "result", result)
	return nil
}

// unprocessable answers a validly signed delivery berth cannot act on.
func (s *Service) unprocessable(typ, txn string, why error) error {
	s.webhooks.WithLabelValues(typ, "unprocessable").Inc()
	s.log.Error("signed webhook berth cannot process; take it up with the gateway", "type", typ, "txn", txn, "err", why)
	return nil
}

// chargeSucceeded records the money of one provider transaction once, and
// in the same transaction either confirms its booking or requests its
// refund. Confirmation runs in a savepoint: when it fails half-way (a seat
// that is gone), everything it did is undone before the money is recorded
// for refund.
//
// Money of the wrong amount or currency under the booking's own charge
// also ends the hold, as charge.failed does: the charge is spent (a
// booking has one, and its transaction id is now recorded), so the hold
// could never be paid; kept, it would only lock its seats until it
// expired.
func (s *Service) chargeSucceeded(ctx context.Context, d WebhookData) (string, error) {
	var (
		result string
		freed  *booking.Booking
		first  WebhookData // the recorded report of a transaction reported again
	)
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		freed = nil
		// Taken before Confirm reads the clock, so the recorded time is never
		// later than the one the hold was checked against (I4).
		now := s.clock.Now()
		var paymentID int64
		// The UNIQUE provider_txn_id makes this the one delivery that
		// processes the money: concurrent duplicates wait here for it to
		// commit, then find the row and stop.
		err := tx.QueryRow(ctx, `INSERT INTO payment (provider_txn_id, booking_id, amount, currency, outcome, reason, received_at)
			VALUES ($1, $2, $3, $4, 'refund', 'processing', $5)
			ON CONFLICT (provider_txn_id) DO NOTHING RETURNING id`,
			d.ProviderTxnID, d.BookingID, d.Amount, d.Currency, now).Scan(&paymentID)
		if errors.Is(err, pgx.ErrNoRows) {
			result = "duplicate"
			// A gateway reports one transaction once, however often it
			// delivers the report. Another booking or other money under a
			// recorded transaction is money berth may never see again: it
			// is neither confirmed nor refunded here (a transaction is
			// recorded once), so it is said, loudly, for a person to settle
			// from the gateway's records.
			if err := tx.QueryRow(ctx, `SELECT booking_id, amount, currency FROM payment WHERE provider_txn_id = $1`,
				d.ProviderTxnID).Scan(&first.BookingID, &first.Amount, &first.Currency); err != nil {
				return fmt.Errorf("read recorded payment %s: %w", d.ProviderTxnID, err)
			}
			if first.BookingID != d.BookingID || first.Amount != d.Amount || first.Currency != d.Currency {
				result = "conflicting"
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("record payment: %w", err)
		}
		// Only the charge berth started for this booking may confirm it:
		// money the gateway reports under another transaction (someone
		// paying for another's booking, a charge berth never asked for) is
		// recorded and refunded.
		ours, err := ownCharge(ctx, tx, d)
		if err != nil {
			return err
		}
		if !ours {
			reason := ReasonNotOurCharge
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM booking WHERE id = $1)`, d.BookingID).Scan(&exists); err != nil {
				return fmt.Errorf("read booking %d: %w", d.BookingID, err)
			}
			if !exists {
				reason = ReasonUnknownBooking
			}
			return s.refundPayment(ctx, tx, paymentID, d, reason, now, &result)
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return fmt.Errorf("savepoint: %w", err)
		}
		_, cerr := s.life.Confirm(ctx, sp, d.BookingID, d.Amount, d.Currency)
		if cerr == nil {
			if err := sp.Commit(ctx); err != nil {
				return fmt.Errorf("release savepoint: %w", err)
			}
			if _, err := tx.Exec(ctx, `UPDATE payment SET outcome = 'confirmed', reason = NULL WHERE id = $1`, paymentID); err != nil {
				return fmt.Errorf("mark payment %d confirmed: %w", paymentID, err)
			}
			result = "confirmed"
			return nil
		}
		if err := sp.Rollback(ctx); err != nil {
			return fmt.Errorf("roll back confirmation: %w", errors.Join(cerr, err))
		}
		if fault.CodeOf(cerr) == "" && !errors.Is(cerr, booking.ErrIncomplete) {
			// Not a verdict on the booking (a deadlock, a lost connection):
			// the whole delivery is retried, by InTx or by the gateway.
			return cerr
		}
		reason, err := refundReason(ctx, tx, d, cerr, now)
		if err != nil {
			return err
		}
		if err := s.refundPayment(ctx, tx, paymentID, d, reason, now, &result); err != nil {
			return err
		}
		if reason != ReasonWrongAmount && reason != ReasonWrongCurrency {
			return nil
		}
		// After the refund request, so that booking.cancelled shows the
		// refund owed.
		b, released, err := s.life.FailPayment(ctx, tx, d.BookingID)
		if err != nil {
			return err
		}
		if released {
			result, freed = result+"_released", b
		}
		return nil
	})
	if err == nil {
		s.life.Released(ctx, freed)
	}
	if result == "conflicting" {
		s.log.Error("the gateway reports a recorded transaction again with other money; this money is neither confirmed nor refunded: take it up with the gateway",
			"txn", d.ProviderTxnID, "booking", d.BookingID, "amount", d.Amount, "currency", d.Currency,
			"recorded_booking", first.BookingID, "recorded_amount", first.Amount, "recorded_currency", first.Currency)
	}
	return result, err
}

// refundPayment marks recorded payment id for refund for reason and
// requests the refund of its money.
func (s *Service) refundPayment(ctx context.Context, tx pgx.Tx, id int64, d WebhookData, reason string, now time.Time, result *string) error {
	if _, err := tx.Exec(ctx, `UPDATE payment SET reason = $2 WHERE id = $1`, id, reason); err != nil {
		return fmt.Errorf("mark payment %d for refund: %w", id, err)
	}
	*result = "refunded_" + reason
	if d.Amount == 0 {
		return nil
	}
	return s.requestRefund(ctx, tx, RefundRequestedPayload{BookingID: d.BookingID, Amount: d.Amount, Currency: d.Currency,
		Reason: reason, ProviderTxnID: d.ProviderTxnID}, now)
}

// ownCharge reports whether d's transaction is the charge berth started
// for d's booking. A charge whose gateway answer berth has not stored yet
// (the webhook overtook it) takes d's transaction id, unless that id is
// another charge's: the gateway made that charge for berth, with berth's
// idempotency key, for this booking.
func ownCharge(ctx context.Context, tx pgx.Tx, d WebhookData) (bool, error) {
	// One UPDATE, not a read: when the payment start is storing the same
	// transaction id at this moment, the UPDATE waits for its row lock and
	// re-checks the row as committed, where a read in this statement's
	// snapshot would still see no transaction id and refuse genuine money.
	var one int
	err := tx.QueryRow(ctx, `UPDATE charge SET provider_txn_id = $2
		WHERE booking_id = $1 AND (provider_txn_id IS NULL OR provider_txn_id = $2)
			AND NOT EXISTS (SELECT 1 FROM charge o WHERE o.provider_txn_id = $2 AND o.id <> charge.id)
		RETURNING 1`, d.BookingID, d.ProviderTxnID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("find the charge of booking %d: %w", d.BookingID, err)
	}
	return true, nil
}

// refundReason says why money for d could not confirm its booking.
func refundReason(ctx context.Context, tx pgx.Tx, d WebhookData, cerr error, now time.Time) (string, error) {
	var (
		status   booking.Status
		expires  time.Time
		amount   int64
		currency string
	)
	err := tx.QueryRow(ctx, `SELECT status, hold_expires_at, amount, currency FROM booking WHERE id = $1`, d.BookingID).
		Scan(&status, &expires, &amount, &currency)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ReasonUnknownBooking, nil
	case err != nil:
		return "", fmt.Errorf("read booking %d: %w", d.BookingID, err)
	case errors.Is(cerr, booking.ErrIncomplete):
		return ReasonSeatGone, nil
	case holdOver(status, expires, now):
		return ReasonLate, nil
	case status.Paid():
		return ReasonAlreadyConfirmed, nil
	case status != booking.Held:
		return ReasonNotHeld, nil
	case currency != d.Currency:
		return ReasonWrongCurrency, nil
	case amount != d.Amount:
		return ReasonWrongAmount, nil
	}
	// Confirm refused for a reason of its own; the money is returned all
	// the same.
	return ReasonNotHeld, nil
}

// requestRefund writes the refund.requested event of r, money that arrived
// for a booking but did not confirm it, and marks the booking, if there is
// one, as owed a refund, adding the money to what it shows owed back
// (refund_returned) when it is in the booking's currency. Updating the
// booking row first also locks it, which orders the event among the
// booking's others; the event carries the booking as that update left it
// (booking.RefundEvent), or only its id when there is no such booking
// (ReasonUnknownBooking).
func (s *Service) requestRefund(ctx context.Context, tx pgx.Tx, r RefundRequestedPayload, now time.Time) error {
	b, err := bookingIfAny(tx.QueryRow(ctx, `UPDATE booking SET refund_status = 'REQUESTED',
			refund_returned = refund_returned + CASE WHEN currency = $3 THEN $2::bigint ELSE 0 END
		WHERE id = $1
		RETURNING `+booking.Columns, r.BookingID, r.Amount, r.Currency))
	if err != nil {
		return fmt.Errorf("mark booking %d refund requested: %w", r.BookingID, err)
	}
	return s.life.WriteRefundEvent(ctx, tx, outbox.RefundRequested, b, r.BookingID, r, now)
}

// bookingIfAny scans the booking a statement returned, nil when it
// returned none (money for a booking id that names no booking).
func bookingIfAny(row pgx.Row) (*booking.Booking, error) {
	b, err := booking.Scan(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return b, err
}

// chargeFailed releases the booking at once, so its seats go back on sale.
// A failure of a transaction that is not the booking's charge (or of a
// booking that never started one), or of one whose money was already
// recorded, changes nothing.
func (s *Service) chargeFailed(ctx context.Context, d WebhookData) (string, error) {
	var (
		result string
		freed  *booking.Booking
	)
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		freed = nil
		ours, err := ownCharge(ctx, tx, d)
		if err != nil {
			return err
		}
		var paid bool
		err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM payment WHERE provider_txn_id = $1)`, d.ProviderTxnID).Scan(&paid)
		if err != nil {
			return fmt.Errorf("read payment %s: %w", d.ProviderTxnID, err)
		}
		switch {
		case !ours:
			result = "other_charge"
			return nil
		case paid:
			result = "already_succeeded"
			return nil
		}
		b, released, err := s.life.FailPayment(ctx, tx, d.BookingID)
		if err != nil {
			return err
		}
		result = "not_held"
		if released {
			result, freed = "released", b
		}
		return nil
	})
	if err == nil {
		s.life.Released(ctx, freed)
	}
	return result, err
}

// refundSucceeded records the gateway's word that a refund succeeded and
// completes berth's refund if it already knows which one that is;
// otherwise the refunds consumer completes it when it stores the gateway's
// answer (see Refunds.link).
func (s *Service) refundSucceeded(ctx context.Context, d WebhookData) (string, error) {
	var result string
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		now := s.clock.Now()
		// Before the link, every distinct report is kept (reports): the
		// link completes the refund if one of them is its money. After it,
		// a report is checked at once, against the refund read in the same
		// statement: a refund berth has sent must come back whole, and one
		// reported for other money completes nothing and is not kept, so
		// that the gateway's right report, when it comes, still counts.
		var (
			refundID *int64
			amount   *int64
			currency *string
		)
		err := tx.QueryRow(ctx, `WITH up AS (
				INSERT INTO gateway_refund (gateway_refund_id, amount, currency, succeeded_at, reports)
				VALUES ($1, $2, $3, $4, jsonb_build_array(jsonb_build_object('amount', $2::bigint, 'currency', $3::text)))
				ON CONFLICT (gateway_refund_id) DO UPDATE
					SET amount = EXCLUDED.amount, currency = EXCLUDED.currency, succeeded_at = EXCLUDED.succeeded_at,
						reports = gateway_refund.reports || EXCLUDED.reports
					WHERE gateway_refund.succeeded_at IS NULL
						OR (gateway_refund.refund_id IS NULL AND NOT gateway_refund.reports @> EXCLUDED.reports)
				RETURNING refund_id)
			SELECT up.refund_id, r.amount, r.currency FROM up LEFT JOIN refund r ON r.id = up.refund_id`,
			d.ProviderTxnID, d.Amount, d.Currency, now).Scan(&refundID, &amount, &currency)
		if errors.Is(err, pgx.ErrNoRows) {
			result = "duplicate"
			return nil
		}
		if err != nil {
			return fmt.Errorf("record refund %s: %w", d.ProviderTxnID, err)
		}
		if refundID == nil {
			result = "early"
			return nil
		}
		want := refundMoney{id: *refundID, amount: deref(amount), currency: deref(currency)}
		if !want.matches(d.Amount, d.Currency) {
			result = "mismatch"
			s.refundMismatch(want, d.ProviderTxnID, d.Amount, d.Currency)
			return forgetRefundReport(ctx, tx, d.ProviderTxnID)
		}
		result = "completed"
		return s.completeRefund(ctx, tx, *refundID, now)
	})
	return result, err
}

// forgetRefundReport undoes what a refund.succeeded recorded of gateway
// refund id, keeping the link to berth's refund.
func forgetRefundReport(ctx context.Context, tx pgx.Tx, id string) error {
	_, err := tx.Exec(ctx, `UPDATE gateway_refund SET amount = NULL, currency = NULL, succeeded_at = NULL, reports = '[]'
		WHERE gateway_refund_id = $1`, id)
	if err != nil {
		return fmt.Errorf("forget the report of refund %s: %w", id, err)
	}
	return nil
}

// refundMoney is what berth asked the gateway to refund (refund id).
type refundMoney struct {
	id       int64
	amount   int64
	currency string
}

func (m refundMoney) matches(amount int64, currency string) bool {
	return m.amount == amount && m.currency == currency
}

// refundMismatch logs a refund reported done for other money than berth
// asked: someone must look at it with the gateway.
func (s *Service) refundMismatch(want refundMoney, gatewayID string, amount int64, currency string) {
	s.log.Error("the gateway reports a refund done for other money than berth asked; it stays REQUESTED: take it up with the gateway",
		"refund", want.id, "gateway_refund", gatewayID, "asked", want.amount, "asked_currency", want.currency,
		"reported", amount, "reported_currency", currency)
}

// completeRefund marks refund id SUCCEEDED, once, updates its booking's
// refund status and writes refund.completed.
func (s *Service) completeRefund(ctx context.Context, tx pgx.Tx, id int64, now time.Time) error {
	var c RefundCompleted
	err := tx.QueryRow(ctx, `UPDATE refund r SET status = 'SUCCEEDED', completed_at = $2
		FROM payment p
		WHERE r.id = $1 AND r.status = 'REQUESTED' AND p.id = r.payment_id
		RETURNING r.id, r.booking_id, r.amount, r.currency, p.provider_txn_id, r.gateway_refund_id`, id, now).
		Scan(&c.RefundID, &c.BookingID, &c.Amount, &c.Currency, &c.ProviderTxnID, &c.GatewayRefundID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("complete refund %d: %w", id, err)
	}
	// The booking's refund is SUCCEEDED once nothing it is owed is still
	// outstanding: no unfinished refund, no refunded payment and no
	// cancellation refund still waiting for its refund row. The event
	// carries the booking as this leaves it; money for no booking
	// (ReasonUnknownBooking) has none, and its event only the id.
	b, err := bookingIfAny(tx.QueryRow(ctx, `UPDATE booking b SET refund_status = CASE WHEN
			NOT EXISTS (SELECT 1 FROM refund r WHERE r.booking_id = b.id AND r.status <> 'SUCCEEDED')
			AND NOT EXISTS (SELECT 1 FROM payment p WHERE p.booking_id = b.id AND p.amount > 0
				AND (p.outcome = 'refund' OR coalesce(b.refund_amount, 0) > 0)
				AND NOT EXISTS (SELECT 1 FROM refund r WHERE r.payment_id = p.id))
			THEN 'SUCCEEDED' ELSE 'REQUESTED' END
		WHERE b.id = $1
		RETURNING `+booking.Columns, c.BookingID))
	if err != nil {
		return fmt.Errorf("update refund status of booking %d: %w", c.BookingID, err)
	}
	s.refunds.WithLabelValues("completed").Inc()
	return s.life.WriteRefundEvent(ctx, tx, outbox.RefundCompleted, b, c.BookingID, c, now)
}
