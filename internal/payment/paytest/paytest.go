// Package paytest helps tests pay for bookings and run refunds the way the
// gateway and the event relay will: signed webhooks sent over HTTP, and
// refund.requested events handed to the refunds consumer.
package paytest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/events"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/pg"
)

// Key returns the webhook HMAC key of apptest.WebhookSecret.
func Key(t testing.TB) []byte {
	t.Helper()
	k, err := config.WebhookKey(apptest.WebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Body returns a webhook body.
func Body(t testing.TB, typ string, d payment.WebhookData) []byte {
	t.Helper()
	b, err := json.Marshal(payment.Webhook{Type: typ, Data: d})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Headers returns the signature headers of delivery id of body, signed with
// key and stamped at, as apptest.Request takes them.
func Headers(key []byte, id string, at time.Time, body []byte) map[string]string {
	h := http.Header{}
	payment.SignHeaders(h, key, id, at, body)
	return map[string]string{
		payment.HeaderID: h.Get(payment.HeaderID), payment.HeaderTimestamp: h.Get(payment.HeaderTimestamp),
		payment.HeaderSignature: h.Get(payment.HeaderSignature),
	}
}

// Send posts a webhook to the berth at base, signed with the test secret and
// stamped at.
func Send(t testing.TB, base string, at time.Time, typ string, d payment.WebhookData) *apptest.Response {
	t.Helper()
	body := Body(t, typ, d)
	return apptest.Do(t, base, apptest.Request{Method: http.MethodPost, Path: "/payments/webhook", Body: body,
		Header: Headers(Key(t), fmt.Sprintf("msg_%x", rand.Uint64()), at, body)})
}

// Charge returns webhook data for a charge of booking id's full amount
// under a fresh provider transaction id. The booking's charge (the one
// berth started, which alone may confirm it) gets that transaction id
// unless it already has one: a second Charge of a booking is money under
// a transaction berth did not start for it. Foreign returns one without
// touching the booking's charge.
func Charge(t testing.TB, pool *pgxpool.Pool, id int64) payment.WebhookData {
	t.Helper()
	d := Foreign(t, pool, id)
	_, err := pool.Exec(context.Background(), `INSERT INTO charge (booking_id, amount, currency, provider_txn_id, created_at)
		SELECT id, amount, currency, $2, now() FROM booking WHERE id = $1
		ON CONFLICT (booking_id) DO UPDATE SET provider_txn_id = EXCLUDED.provider_txn_id
			WHERE charge.provider_txn_id IS NULL`, id, d.ProviderTxnID)
	if err != nil {
		t.Fatalf("paytest: charge of booking %d: %v", id, err)
	}
	return d
}

// Foreign returns webhook data for booking id's full amount under a fresh
// provider transaction id that is not the booking's charge.
func Foreign(t testing.TB, pool *pgxpool.Pool, id int64) payment.WebhookData {
	t.Helper()
	d := payment.WebhookData{BookingID: id, ProviderTxnID: fmt.Sprintf("txn_test_%d_%x", id, rand.Uint64())}
	err := pool.QueryRow(context.Background(), `SELECT amount, currency FROM booking WHERE id = $1`, id).Scan(&d.Amount, &d.Currency)
	if err != nil {
		t.Fatalf("paytest: booking %d: %v", id, err)
	}
	return d
}

// Pay sends charge.succeeded for booking id's full amount at the server's
// current time, failing t unless berth answers 200, and returns the
// webhook's data.
func Pay(t testing.TB, s *apptest.Server, id int64) payment.WebhookData {
	t.Helper()
	d := Charge(t, s.App.Pool, id)
	if r := Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, d); r.Status != http.StatusOK {
		t.Fatalf("paytest: pay booking %d: %d %s", id, r.Status, r.Body)
	}
	return d
}

// Confirm confirms held booking id within tx as a charge.succeeded webhook
// does: it records a charge of the booking's full amount, received now, and
// confirms the booking through life. It is for tests that need confirmed
// bookings without going through the gateway; the audit (I4) holds for
// them. Confirm's errors are returned as they are.
func Confirm(ctx context.Context, tx pgx.Tx, life *booking.Lifecycle, id int64) error {
	var (
		amount   int64
		currency string
	)
	if err := tx.QueryRow(ctx, `SELECT amount, currency FROM booking WHERE id = $1`, id).Scan(&amount, &currency); err != nil {
		return fmt.Errorf("paytest: booking %d: %w", id, err)
	}
	// The confirmation first: one that is refused (the booking is no
	// longer HELD, its hold ran out) returns its fault before a payment is
	// recorded that a booking may hold only once.
	if _, err := life.Confirm(ctx, tx, id, amount, currency); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO payment (provider_txn_id, booking_id, amount, currency, outcome, received_at)
		VALUES ($1, $2, $3, $4, 'confirmed', $5)`,
		fmt.Sprintf("txn_test_%d_%x", id, rand.Uint64()), id, amount, currency, life.Clock.Now())
	if err != nil {
		return fmt.Errorf("paytest: record the charge of booking %d: %w", id, err)
	}
	return nil
}

// Relay hands refund.requested events from the outbox to a consumer, each
// once, as the event relay will: Handle runs in a transaction, and an event
// whose Handle failed is handed again by the next Drain. A consumer that
// sends after its transaction (the refunds consumer) is then told to send.
type Relay struct {
	Pool     *pgxpool.Pool
	Consumer events.Consumer
	done     map[string]bool
}

// Drain hands every refund.requested event not yet processed to the
// consumer, in outbox order, and returns how many it processed and the
// errors of those that failed.
func (r *Relay) Drain(ctx context.Context) (int, []error) {
	if r.done == nil {
		r.done = map[string]bool{}
	}
	rows, err := r.Pool.Query(ctx, `SELECT event_id::text, type, booking_id, created_at, payload
		FROM outbox WHERE type = $1 ORDER BY id`, outbox.RefundRequested)
	if err != nil {
		return 0, []error{err}
	}
	evs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (events.Event, error) {
		var e events.Event
		var payload []byte
		err := row.Scan(&e.ID, &e.Type, &e.BookingID, &e.Time, &payload)
		e.Data = payload
		return e, err
	})
	if err != nil {
		return 0, []error{err}
	}
	n := 0
	var errs []error
	for _, e := range evs {
		if r.done[e.ID] {
			continue
		}
		err := pg.InTx(ctx, r.Pool, func(tx pgx.Tx) error { return r.Consumer.Handle(ctx, tx, e) })
		if err != nil {
			errs = append(errs, fmt.Errorf("event %s: %w", e.ID, err))
			continue
		}
		r.done[e.ID] = true
		n++
	}
	// The refunds consumer asks the gateway after its transaction, as the
	// running process does every second.
	if sender, ok := r.Consumer.(interface {
		Send(ctx context.Context, retryNow bool) (int, []error)
	}); ok {
		_, sendErrs := sender.Send(ctx, true)
		errs = append(errs, sendErrs...)
	}
	return n, errs
}
