package payment_test

import (
	"net/http"
	"testing"
	"time"

	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paytest"
)

// Money under a transaction that is not the charge berth started for that
// booking never confirms it, even validly signed (the attack: pay one's own
// charge at the simulator, then replay its signed charge.succeeded with
// another customer's booking id). It is recorded and refunded. A
// charge.failed of such a transaction releases nothing.
func TestMoneyForAnotherChargeNeverConfirms(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	victim := hold(t, s, 7, flightID, "10A")     // never started a payment
	attacker := hold(t, s, 8, flightID, "10B")   // started one
	own := paytest.Charge(t, pool, attacker)     // the attacker's charge
	failVictim := hold(t, s, 9, flightID, "10C") // its charge.failed is forged below

	send := func(name, typ string, d payment.WebhookData) {
		t.Helper()
		if r := paytest.Send(t, s.URL, s.Clock.Now(), typ, d); r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s, want 200", name, r.Status, r.Body)
		}
	}
	replayed := own
	replayed.BookingID = victim
	replayed.Amount, replayed.Currency = paytest.Foreign(t, pool, victim).Amount, paytest.Foreign(t, pool, victim).Currency
	send("the attacker's transaction for the victim's booking", payment.ChargeSucceeded, replayed)
	fresh := paytest.Foreign(t, pool, victim)
	send("a transaction berth never started", payment.ChargeSucceeded, fresh)
	for _, d := range []payment.WebhookData{replayed, fresh} {
		if p := paymentOf(t, pool, d.ProviderTxnID); p.N != 1 || p.Outcome != "refund" || p.Reason != payment.ReasonNotOurCharge {
			t.Errorf("payment %s: %+v, want recorded and refunded as %s", d.ProviderTxnID, p, payment.ReasonNotOurCharge)
		}
	}
	if b := getBooking(t, pool, victim); b.Status != "HELD" {
		t.Errorf("victim's booking %s, want still HELD", b.Status)
	}
	if n := events(t, pool, victim, outbox.RefundRequested); n != 2 {
		t.Errorf("%d refund.requested for the victim's booking, want 2 (each foreign payment returned)", n)
	}

	forged := paytest.Foreign(t, pool, failVictim)
	send("charge.failed of a transaction berth never started", payment.ChargeFailed, forged)
	otherFail := own
	otherFail.BookingID = failVictim
	send("charge.failed of another booking's charge", payment.ChargeFailed, otherFail)
	if b := getBooking(t, pool, failVictim); b.Status != "HELD" {
		t.Errorf("charge.failed of someone else's transaction: booking %s, want still HELD", b.Status)
	}

	// The victim's own charge confirms it.
	mine := paytest.Charge(t, pool, victim)
	send("the victim's own charge", payment.ChargeSucceeded, mine)
	if b := getBooking(t, pool, victim); b.Status != "CONFIRMED" {
		t.Errorf("victim's own charge: booking %s, want CONFIRMED", b.Status)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox WHERE type = $1`, outbox.BookingConfirmed); n != 1 {
		t.Errorf("%d bookings confirmed, want only the victim's, by its own charge", n)
	}
	settle(t, s, nil)
	mustAudit(t, s)
}

// A webhook that overtakes berth's storing of the gateway's answer (the
// charge is recorded, its transaction id not yet) is that charge's: it
// confirms, and the charge takes its id.
func TestWebhookBeforeTheChargeIDIsStored(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	id := hold(t, s, 7, flightID, "10A")
	if _, err := pool.Exec(t.Context(), `INSERT INTO charge (booking_id, amount, currency, created_at)
		SELECT id, amount, currency, now() FROM booking WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	d := paytest.Foreign(t, pool, id)
	if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, d); r.Status != http.StatusOK {
		t.Fatalf("webhook: %d %s", r.Status, r.Body)
	}
	if b := getBooking(t, pool, id); b.Status != "CONFIRMED" {
		t.Errorf("booking %s, want CONFIRMED", b.Status)
	}
	if n := count(t, pool, `SELECT count(*) FROM charge WHERE booking_id = $1 AND provider_txn_id = $2`, id, d.ProviderTxnID); n != 1 {
		t.Errorf("the charge did not take the webhook's transaction id")
	}
	mustAudit(t, s)
}

// A webhook that arrives while the payment start is storing that same
// transaction id (its row lock held, not yet committed) waits for it and
// confirms: it must not judge the charge by what it saw before the store
// committed and refund genuine money.
func TestWebhookDuringTheChargeIDStore(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	id := hold(t, s, 7, flightID, "10A")
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `INSERT INTO charge (booking_id, amount, currency, created_at)
		SELECT id, amount, currency, now() FROM booking WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	d := paytest.Foreign(t, pool, id)
	store, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Rollback(ctx) }()
	if _, err := store.Exec(ctx, `UPDATE charge SET provider_txn_id = $2 WHERE booking_id = $1`, id, d.ProviderTxnID); err != nil {
		t.Fatal(err)
	}
	answered := make(chan int, 1)
	go func() { answered <- paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, d).Status }()
	// The webhook is now waiting for the store's row lock (or about to).
	time.Sleep(300 * time.Millisecond)
	if err := store.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if st := <-answered; st != http.StatusOK {
		t.Fatalf("webhook: %d, want 200", st)
	}
	if b := getBooking(t, pool, id); b.Status != "CONFIRMED" {
		t.Errorf("booking %s, want CONFIRMED by its own charge", b.Status)
	}
	if n := count(t, pool, `SELECT count(*) FROM payment WHERE outcome = 'refund'`); n != 0 {
		t.Errorf("%d payments refunded, want none", n)
	}
	mustAudit(t, s)
}
