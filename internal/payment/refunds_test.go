package payment_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paytest"
	"berth.dev/berth/internal/pg"
)

// Late money is refunded once: the consumer asks the gateway, the webhook
// completes it, and handing the same event again (at-least-once delivery)
// or repeating the webhook changes nothing.
func TestRefundCompletesOnce(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	id := hold(t, s, 7, flightID, "10A")
	s.Clock.Advance(10 * time.Minute)
	d := paytest.Pay(t, s, id)

	r := s.Do(apptest.Request{Method: http.MethodGet, Path: path("/bookings/%d", id), Token: s.Token("customer", 7)})
	// SUCCEEDED too once an in-process refunds consumer got to it.
	if m := r.Map(t); m["refundStatus"] != "REQUESTED" && m["refundStatus"] != "SUCCEEDED" {
		t.Errorf("booking before the refund: %s, want a refundStatus", r.Body)
	}
	settle(t, s, nil)
	r = s.Do(apptest.Request{Method: http.MethodGet, Path: path("/bookings/%d", id), Token: s.Token("customer", 7)})
	if m := r.Map(t); m["refundStatus"] != "SUCCEEDED" || m["status"] != "EXPIRED" {
		t.Errorf("booking after the refund: %s, want EXPIRED with refundStatus SUCCEEDED", r.Body)
	}
	if n := events(t, pool, id, outbox.RefundCompleted); n != 1 {
		t.Errorf("%d refund.completed events, want 1", n)
	}

	// The relay hands the event again; the gateway sees the same key.
	again := &paytest.Relay{Pool: pool, Consumer: s.App.Refunds}
	if n, errs := again.Drain(t.Context()); n != 1 || len(errs) > 0 {
		t.Fatalf("redelivery: %d processed, %v", n, errs)
	}
	if err := s.App.PaySim.Idle(t.Context()); err != nil {
		t.Fatal(err)
	}
	st := s.App.PaySim.Stats()
	if st.RefundsPerCharge[d.ProviderTxnID] != 1 || st.RefundedAmount[d.ProviderTxnID] != price {
		t.Errorf("gateway refunded %d times (%d); want once, %d", st.RefundsPerCharge[d.ProviderTxnID],
			st.RefundedAmount[d.ProviderTxnID], price)
	}
	if n := count(t, pool, `SELECT count(*) FROM refund`); n != 1 {
		t.Errorf("%d refunds recorded, want 1", n)
	}
	// The gateway repeats its webhook.
	var gatewayID string
	if err := pool.QueryRow(t.Context(), `SELECT gateway_refund_id FROM refund`).Scan(&gatewayID); err != nil {
		t.Fatal(err)
	}
	if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.RefundSucceeded, payment.WebhookData{
		BookingID: id, ProviderTxnID: gatewayID, Amount: price, Currency: "VND"}); r.Status != http.StatusOK {
		t.Errorf("repeated refund webhook: %d %s", r.Status, r.Body)
	}
	if n := events(t, pool, id, outbox.RefundCompleted); n != 1 {
		t.Errorf("%d refund.completed events after repeats, want 1", n)
	}
	mustAudit(t, s)
}

// Cancelling a confirmed flight booking refunds by the fare's rule copied
// onto the booking, computed with the server's clock, against the charge
// that confirmed it; what the rule keeps is retained (I5).
func TestCancelConfirmedBookingRefundsByRule(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	pool := s.App.Pool
	departure := apptest.Epoch.Add(48 * time.Hour)
	flightID := refunds80(t, s, "VN900")

	early := hold(t, s, 7, flightID, "10A", "10B")
	earlyPay := paytest.Pay(t, s, early)
	lastMinute := hold(t, s, 7, flightID, "11A")
	lastPay := paytest.Pay(t, s, lastMinute)

	v := s.Customer(7).Cancel(t, early)
	want := int64(2*price) * 80 / 100
	if v.RefundAmount == nil || *v.RefundAmount != want || v.RefundStatus != "REQUESTED" {
		t.Errorf("cancel 48h before departure: %+v, want refundAmount %d, refundStatus REQUESTED", v, want)
	}
	s.Clock.Set(departure.Add(-23 * time.Hour))
	if v := s.Customer(7).Cancel(t, lastMinute); v.RefundAmount == nil || *v.RefundAmount != 0 || v.RefundStatus != "" {
		t.Errorf("cancel 23h before departure: %+v, want refundAmount 0 and no refund", v)
	}
	settle(t, s, nil)
	st := s.App.PaySim.Stats()
	if st.RefundedAmount[earlyPay.ProviderTxnID] != want || st.RefundsPerCharge[earlyPay.ProviderTxnID] != 1 {
		t.Errorf("the gateway refunded %d in %d refunds of the confirming charge, want %d in 1",
			st.RefundedAmount[earlyPay.ProviderTxnID], st.RefundsPerCharge[earlyPay.ProviderTxnID], want)
	}
	if st.RefundsPerCharge[lastPay.ProviderTxnID] != 0 {
		t.Errorf("the last-minute cancellation was refunded")
	}
	if b := getBooking(t, pool, early); b.RefundStatus != "SUCCEEDED" {
		t.Errorf("refund status %q, want SUCCEEDED", b.RefundStatus)
	}
	if got := fareCounters(t, pool, flightID); got != (counters{}) {
		t.Errorf("counters %+v after both cancellations, want all free", got)
	}
	if st := seat(t, pool, flightID, "10A"); st.Status != "AVAILABLE" {
		t.Errorf("seat 10A %+v, want AVAILABLE", st)
	}
	mustAudit(t, s)

	// The audit notices money that does not balance.
	if _, err := pool.Exec(t.Context(), `UPDATE refund SET amount = amount - 1`); err != nil {
		t.Fatal(err)
	}
	results := auditResults(t, s)
	if results["I5"] {
		t.Error("I5 passed with a refund one unit short")
	}

}

// A cancellation that read the booking HELD while its confirmation was
// committing is decided again on the booking as it then is, not refused:
// the owner's DELETE cancels the confirmed booking and refunds it by its
// rule, as it would a moment later.
func TestCancelMeetingAConfirmationCancelsTheConfirmedBooking(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	id := hold(t, s, 7, flightID, "10A")
	ctx := t.Context()
	confirm, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = confirm.Rollback(ctx) }()
	if err := paytest.Confirm(ctx, confirm, s.App.Life, id); err != nil {
		t.Fatal(err)
	}
	answered := make(chan *apptest.Response, 1)
	go func() {
		answered <- s.Do(apptest.Request{Method: http.MethodDelete, Path: path("/bookings/%d", id), Token: s.Token("customer", 7)})
	}()
	// The cancellation has read the booking HELD and waits for the row.
	apptest.Eventually(t, 10*time.Second, "the cancellation waits for the confirmation's row lock", func() bool {
		return count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
	if err := confirm.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-answered
	if r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s, want 200", r.Status, r.Body)
	}
	if v := r.Map(t); v["status"] != "CANCELLED" || v["refundAmount"] != v["amount"] {
		t.Errorf("cancel: %s, want CANCELLED with the whole amount refunded (departure days away)", r.Body)
	}
	mustAudit(t, s)
}

// paytest.Confirm, for other packages' tests, confirms as the webhook does:
// the audit holds, and a cancellation refunds the recorded charge.
func TestPaytestConfirm(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	id := hold(t, s, 7, flightID, "12A")
	if err := pg.InTx(t.Context(), pool, func(tx pgx.Tx) error { return paytest.Confirm(t.Context(), tx, s.App.Life, id) }); err != nil {
		t.Fatal(err)
	}
	if b := getBooking(t, pool, id); b.Status != "CONFIRMED" {
		t.Fatalf("booking %s, want CONFIRMED", b.Status)
	}
	mustAudit(t, s)
	if r := s.Do(apptest.Request{Method: http.MethodDelete, Path: path("/bookings/%d", id), Token: s.Token("customer", 7)}); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	// The refund is owed from the cancellation's commit on: the ledger
	// balances before the refunds consumer has run.
	mustAudit(t, s)
	settle(t, s, nil)
	if b := getBooking(t, pool, id); b.RefundStatus != "SUCCEEDED" {
		t.Errorf("refund status %q, want SUCCEEDED", b.RefundStatus)
	}
	mustAudit(t, s)

	// A confirmation without a charge is what I4 exists to catch.
	free := hold(t, s, 8, flightID, "12B")
	err := pg.InTx(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := s.App.Life.Confirm(t.Context(), tx, free, price, "VND")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if auditResults(t, s)["I4"] {
		t.Error("I4 passed with a booking confirmed without a charge")
	}
}

// A booking that shows a refund status shows the amounts it is about,
// apart: refundAmount is the cancellation's refund alone (what its quote
// said; a hold's release 0), returnedAmount the money that arrived for it
// and is returned in full, in its answers and in the events the database
// writes (booking_view).
func TestBookingShowsTheAmountOfItsRefund(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	// Cancelled while held, then its late money arrives.
	cancelled := hold(t, s, 7, flightID, "10A", "10B")
	if v := s.Customer(7).Cancel(t, cancelled); v.RefundAmount == nil || *v.RefundAmount != 0 || v.RefundStatus != "" {
		t.Fatalf("cancel a hold: %+v, want refundAmount 0 and no refund", v)
	}
	paytest.Pay(t, s, cancelled)
	// Paid for under a transaction that is not its charge; still held.
	held := hold(t, s, 8, flightID, "11A")
	foreign := paytest.Foreign(t, pool, held)
	if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, foreign); r.Status != http.StatusOK {
		t.Fatalf("charge.succeeded: %d %s", r.Status, r.Body)
	}
	bookings := []struct {
		id, customer     int64
		status           string
		refund, returned any
	}{
		{cancelled, 7, "CANCELLED", float64(0), float64(2 * price)},
		{held, 8, "HELD", nil, float64(price)},
	}
	check := func(refundStatus string) {
		t.Helper()
		for _, b := range bookings {
			r := s.Do(apptest.Request{Method: http.MethodGet, Path: path("/bookings/%d", b.id), Token: s.Token("customer", b.customer)})
			var view map[string]any
			if err := pool.QueryRow(t.Context(), `SELECT booking_view(b) FROM booking b WHERE id = $1`, b.id).Scan(&view); err != nil {
				t.Fatal(err)
			}
			for where, m := range map[string]map[string]any{"GET": r.Map(t), "booking_view": view} {
				if m["status"] != b.status || m["refundStatus"] != refundStatus || m["refundAmount"] != b.refund || m["returnedAmount"] != b.returned {
					t.Errorf("booking %d (%s): status %v, refundStatus %v, refundAmount %v, returnedAmount %v; want %s, %s, %v, %v",
						b.id, where, m["status"], m["refundStatus"], m["refundAmount"], m["returnedAmount"], b.status, refundStatus, b.refund, b.returned)
				}
			}
		}
	}
	check("REQUESTED")
	settle(t, s, nil)
	check("SUCCEEDED")

	// Confirmed, paid a second time under another transaction (returned),
	// then cancelled: the cancellation answers what its quote said.
	paid := hold(t, s, 9, flightID, "12A")
	paytest.Pay(t, s, paid)
	if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, paytest.Foreign(t, pool, paid)); r.Status != http.StatusOK {
		t.Fatalf("second charge.succeeded: %d %s", r.Status, r.Body)
	}
	var quote struct {
		RefundAmount int64 `json:"refundAmount"`
	}
	r := s.Do(apptest.Request{Method: http.MethodGet, Path: path("/bookings/%d/refund-quote", paid), Token: s.Token("customer", 9)})
	r.JSON(t, &quote)
	v := s.Customer(9).Cancel(t, paid)
	if v.RefundAmount == nil || *v.RefundAmount != quote.RefundAmount || v.ReturnedAmount == nil || *v.ReturnedAmount != price {
		t.Errorf("cancelled after money returned: refundAmount %v, returnedAmount %v; want the quote's %d and %d", v.RefundAmount, v.ReturnedAmount, quote.RefundAmount, price)
	}
	mustAudit(t, s)
}
