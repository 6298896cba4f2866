package payment_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paytest"
)

// The race everyone names: money arriving around the moment
// the hold expires. Confirmed strictly before expiry; at and after it the
// money is recorded and refunded, and the seats are never sold.
func TestWebhookAroundHoldExpiry(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	pool := s.App.Pool
	cases := []struct {
		name    string
		offset  time.Duration // from the hold's expiry
		confirm bool
	}{
		{"just before", -time.Microsecond, true},
		{"exactly at", 0, false},
		{"just after", time.Second, false},
	}
	for _, c := range cases {
		s.Clock.Set(apptest.Epoch)
		flightID := newFlight(t, s)
		id := hold(t, s, 7, flightID, "10A", "10B")
		s.Clock.Set(getBooking(t, pool, id).Expires.Add(c.offset))
		d := paytest.Charge(t, pool, id)
		if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, d); r.Status != http.StatusOK {
			t.Fatalf("%s: webhook %d %s", c.name, r.Status, r.Body)
		}
		b := getBooking(t, pool, id)
		p := paymentOf(t, pool, d.ProviderTxnID)
		if c.confirm {
			if b.Status != "CONFIRMED" || p.Outcome != "confirmed" || events(t, pool, id, outbox.BookingConfirmed) != 1 {
				t.Errorf("%s: booking %s, payment %+v; want CONFIRMED with one confirmed payment and event", c.name, b.Status, p)
			}
			if st := seat(t, pool, flightID, "10A"); st.Status != "SOLD" || st.Booking != id {
				t.Errorf("%s: seat 10A %+v, want SOLD for %d", c.name, st, id)
			}
			if got := fareCounters(t, pool, flightID); got != (counters{Sold: 2}) {
				t.Errorf("%s: counters %+v, want sold 2", c.name, got)
			}
			continue
		}
		if b.Status != "HELD" || p.N != 1 || p.Outcome != "refund" || p.Reason != payment.ReasonLate {
			t.Errorf("%s: booking %s, payment %+v; want still HELD (until swept), payment refunded as late", c.name, b.Status, p)
		}
		// SUCCEEDED too once an in-process refunds consumer got to it.
		if b.RefundStatus == "" || events(t, pool, id, outbox.RefundRequested) != 1 || events(t, pool, id, outbox.BookingConfirmed) != 0 {
			t.Errorf("%s: refund status %q, %d refund.requested, %d confirmed events; want a refund, 1, 0", c.name, b.RefundStatus,
				events(t, pool, id, outbox.RefundRequested), events(t, pool, id, outbox.BookingConfirmed))
		}
		if st := seat(t, pool, flightID, "10A"); st.Status == "SOLD" {
			t.Errorf("%s: seat 10A was sold to late money", c.name)
		}
	}
	settle(t, s, nil)
	mustAudit(t, s)
}

// The race that is easy to miss: the hold expired, another customer
// re-held the seat before the sweeper ran, then the first customer's money
// arrives. It must be refunded, and the second customer keeps the seat.
// With a clock that still thinks the hold is valid (a process whose clock
// lags), the seat count check stops it: nothing is confirmed with a
// missing seat.
func TestLateMoneyAfterSeatReclaimed(t *testing.T) {
	t.Parallel()
	for _, lagging := range []bool{false, true} {
		name := map[bool]string{false: "expired", true: "clock lags"}[lagging]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, pool, flightID := startFlight(t)
			first := hold(t, s, 1, flightID, "11A", "11B")
			s.Clock.Advance(11 * time.Minute)
			second := hold(t, s, 2, flightID, "11B")
			if lagging {
				// The first hold still looks valid to the confirming process.
				if _, err := pool.Exec(t.Context(), `UPDATE booking SET hold_expires_at = $2 WHERE id = $1`,
					first, s.Clock.Now().Add(time.Minute)); err != nil {
					t.Fatal(err)
				}
			}
			before := fareCounters(t, pool, flightID)
			d := paytest.Pay(t, s, first)

			p := paymentOf(t, pool, d.ProviderTxnID)
			wantReason := map[bool]string{false: payment.ReasonLate, true: payment.ReasonSeatGone}[lagging]
			if p.Outcome != "refund" || p.Reason != wantReason {
				t.Errorf("payment %+v, want refunded as %s", p, wantReason)
			}
			if b := getBooking(t, pool, first); b.Status == "CONFIRMED" {
				t.Fatalf("booking %d was confirmed with seat 11B held by booking %d", first, second)
			}
			if st := seat(t, pool, flightID, "11B"); st.Status != "HELD" || st.Booking != second {
				t.Errorf("seat 11B %+v, want HELD for the second customer's booking %d", st, second)
			}
			if st := seat(t, pool, flightID, "11A"); st.Status == "SOLD" {
				t.Errorf("seat 11A was sold: a failed confirmation must roll back whole")
			}
			if got := fareCounters(t, pool, flightID); got != before {
				t.Errorf("counters moved from %+v to %+v", before, got)
			}
			if n := events(t, pool, first, outbox.RefundRequested); n != 1 {
				t.Errorf("%d refund.requested events, want 1", n)
			}
			if lagging {
				if _, err := pool.Exec(t.Context(), `UPDATE booking SET hold_expires_at = $2 WHERE id = $1`,
					first, s.Clock.Now().Add(-time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			settle(t, s, nil)
			if b := getBooking(t, pool, first); b.Status != "EXPIRED" || b.RefundStatus != "SUCCEEDED" {
				t.Errorf("first booking %+v after the sweep and the refund, want EXPIRED, refund SUCCEEDED", b)
			}
			if st := s.App.PaySim.Stats(); st.RefundsPerCharge[d.ProviderTxnID] != 1 || st.RefundedAmount[d.ProviderTxnID] != d.Amount {
				t.Errorf("gateway refunded the charge %d times, %d in all; want once, in full", st.RefundsPerCharge[d.ProviderTxnID],
					st.RefundedAmount[d.ProviderTxnID])
			}
			mustAudit(t, s)
		})
	}
}

// Twenty identical deliveries at once: one payment, one confirmation, one
// booking.confirmed event, and every delivery answered 200.
func TestTwentyIdenticalWebhooksAtOnce(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	id := hold(t, s, 3, flightID, "12A", "12C")
	d := paytest.Charge(t, pool, id)
	rs := apptest.Race(20, func(int) *apptest.Response {
		return paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, d)
	})
	for i, r := range rs {
		if r.Status != http.StatusOK {
			t.Errorf("delivery %d: %d %s", i, r.Status, r.Body)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM payment`); n != 1 {
		t.Errorf("%d payments recorded, want 1", n)
	}
	if p := paymentOf(t, pool, d.ProviderTxnID); p.Outcome != "confirmed" {
		t.Errorf("payment %+v, want confirmed", p)
	}
	if b := getBooking(t, pool, id); b.Status != "CONFIRMED" {
		t.Errorf("booking %s, want CONFIRMED", b.Status)
	}
	if n := events(t, pool, id, outbox.BookingConfirmed); n != 1 {
		t.Errorf("%d booking.confirmed events, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox WHERE type = $1`, outbox.RefundRequested); n != 0 {
		t.Errorf("%d refunds requested, want none", n)
	}
	if got := fareCounters(t, pool, flightID); got != (counters{Sold: 2}) {
		t.Errorf("counters %+v, want sold 2", got)
	}
	mustAudit(t, s)
}

// A failed charge releases the hold at once: another customer can hold the
// same seats without waiting for expiry or the sweeper.
func TestChargeFailedFreesSeatsAtOnce(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	id := hold(t, s, 4, flightID, "10A", "10B")
	d := paytest.Charge(t, pool, id)
	for range 2 { // a duplicate changes nothing
		if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeFailed, d); r.Status != http.StatusOK {
			t.Fatalf("charge.failed: %d %s", r.Status, r.Body)
		}
	}
	if b := getBooking(t, pool, id); b.Status != "CANCELLED" || b.CancelReason != "payment_failed" {
		t.Errorf("booking %+v, want CANCELLED payment_failed", b)
	}
	if n := events(t, pool, id, outbox.BookingCancelled); n != 1 {
		t.Errorf("%d booking.cancelled events, want 1", n)
	}
	if got := fareCounters(t, pool, flightID); got != (counters{}) {
		t.Errorf("counters %+v, want all free", got)
	}
	other := hold(t, s, 5, flightID, "10A", "10B")
	if st := seat(t, pool, flightID, "10B"); st.Booking != other {
		t.Errorf("seat 10B %+v, want held by %d", st, other)
	}
	r := s.Do(apptest.Request{Method: http.MethodGet, Path: path("/bookings/%d", id), Token: s.Token("customer", 4)})
	// Like every cancelled booking it says what it refunds: nothing.
	if m := r.Map(t); m["status"] != "CANCELLED" || m["cancelReason"] != "payment_failed" || m["refundAmount"] != float64(0) {
		t.Errorf("GET booking: %s, want CANCELLED payment_failed, refundAmount 0", r.Body)
	}
	mustAudit(t, s)
}

// Deliveries that are not the gateway's are refused with 401 and change
// nothing; signed deliveries whose money does not fit the booking are
// recorded and refunded, never confirmed.
func TestBadWebhooksConfirmNothing(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	otherKey := []byte("another-secret-of-sufficient-len")

	type delivery struct {
		at     time.Time
		key    []byte
		mutate func(d *payment.WebhookData)
		// tamper changes the headers or body after signing.
		tamper func(h map[string]string, body []byte) []byte
	}
	now := func() time.Time { return s.Clock.Now() }
	cases := []struct {
		name       string
		del        delivery
		wantStatus int
		wantReason string
	}{
		{"forged signature", delivery{key: otherKey}, 401, ""},
		{"stale timestamp", delivery{at: now().Add(-payment.Tolerance - time.Second)}, 401, ""},
		{"future timestamp", delivery{at: now().Add(payment.Tolerance + time.Second)}, 401, ""},
		{"body changed after signing", delivery{tamper: func(_ map[string]string, b []byte) []byte {
			return []byte(strings.Replace(string(b), `"amount":`, `"amount":1`, 1))
		}}, 401, ""},
		{"no signature", delivery{tamper: func(h map[string]string, b []byte) []byte {
			delete(h, payment.HeaderSignature)
			return b
		}}, 401, ""},
		{"signature of another version", delivery{tamper: func(h map[string]string, b []byte) []byte {
			h[payment.HeaderSignature] = "v2," + strings.TrimPrefix(h[payment.HeaderSignature], "v1,")
			return b
		}}, 401, ""},
		{"wrong amount", delivery{mutate: func(d *payment.WebhookData) { d.Amount-- }}, 200, payment.ReasonWrongAmount},
		{"wrong currency", delivery{mutate: func(d *payment.WebhookData) { d.Currency = "USD" }}, 200, payment.ReasonWrongCurrency},
		{"unknown booking", delivery{mutate: func(d *payment.WebhookData) { d.BookingID = 999_999 }}, 200, payment.ReasonUnknownBooking},
	}
	for i, c := range cases {
		seatNo := []string{"10A", "10B", "10C", "11A", "11B", "11C", "12A", "12B", "12C"}[i]
		id := hold(t, s, int64(100+i), flightID, seatNo)
		d := paytest.Charge(t, pool, id)
		if c.del.mutate != nil {
			c.del.mutate(&d)
		}
		at, key := c.del.at, c.del.key
		if at.IsZero() {
			at = now()
		}
		if key == nil {
			key = paytest.Key(t)
		}
		body := paytest.Body(t, payment.ChargeSucceeded, d)
		h := paytest.Headers(key, "msg_"+c.name, at, body)
		if c.del.tamper != nil {
			body = c.del.tamper(h, body)
		}
		r := s.Do(apptest.Request{Method: http.MethodPost, Path: "/payments/webhook", Body: body, Header: h})
		if r.Status != c.wantStatus {
			t.Errorf("%s: %d %s, want %d", c.name, r.Status, r.Body, c.wantStatus)
		}
		if c.wantStatus == 401 && r.Code() != "unauthenticated" {
			t.Errorf("%s: code %q, want unauthenticated", c.name, r.Code())
		}
		p := paymentOf(t, pool, d.ProviderTxnID)
		switch {
		case c.wantStatus == 401 && p.N != 0:
			t.Errorf("%s: a refused delivery recorded a payment", c.name)
		case c.wantStatus == 200 && (p.Outcome != "refund" || p.Reason != c.wantReason):
			t.Errorf("%s: payment %+v, want refunded as %s", c.name, p, c.wantReason)
		}
		// Wrong money under the booking's own charge spends it: the hold
		// ends as if the charge had failed. The rest leave it HELD.
		wantStatus := "HELD"
		if c.wantReason == payment.ReasonWrongAmount || c.wantReason == payment.ReasonWrongCurrency {
			wantStatus = "CANCELLED"
		}
		if b := getBooking(t, pool, id); b.Status != wantStatus {
			t.Errorf("%s: booking %s, want %s", c.name, b.Status, wantStatus)
		}
		wantRefunds := 0
		if c.wantStatus == 200 {
			wantRefunds = 1
		}
		if n := events(t, pool, d.BookingID, outbox.RefundRequested); n != wantRefunds {
			t.Errorf("%s: %d refund.requested events, want %d", c.name, n, wantRefunds)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox WHERE type = $1`, outbox.BookingConfirmed); n != 0 {
		t.Errorf("%d bookings confirmed, want none", n)
	}
	if got := fareCounters(t, pool, flightID); got.Sold != 0 {
		t.Errorf("counters %+v, want nothing sold", got)
	}
	s.Clock.Advance(time.Hour)
	settle(t, s, nil)
	mustAudit(t, s)

	// Money kept with no refund owed for it is what I4 and I5 catch.
	if _, err := pool.Exec(t.Context(), `DELETE FROM gateway_refund; WITH gone AS (DELETE FROM refund WHERE id = (SELECT min(id) FROM refund) RETURNING event_id)
		DELETE FROM outbox WHERE event_id::text IN (SELECT event_id FROM gone)`); err != nil {
		t.Fatal(err)
	}
	if got := auditResults(t, s); got["I4"] || got["I5"] {
		t.Errorf("audit %v with a refund gone, want I4 and I5 violated", got)
	}
}

// Key rotation: several signatures, one valid, is accepted; so is a
// timestamp exactly at the edge of the window, either way.
func TestWebhookSignatureRotationAndWindowEdges(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	for i, at := range []time.Time{s.Clock.Now().Add(-payment.Tolerance), s.Clock.Now().Add(payment.Tolerance), s.Clock.Now()} {
		id := hold(t, s, int64(200+i), flightID, []string{"10A", "10B", "10C"}[i])
		d := paytest.Charge(t, pool, id)
		body := paytest.Body(t, payment.ChargeSucceeded, d)
		old := payment.Sign([]byte("the-previous-secret-0123456789"), "msg_rot", at.Unix(), body)
		good := payment.Sign(paytest.Key(t), "msg_rot", at.Unix(), body)
		junk := "v1," + base64.StdEncoding.EncodeToString([]byte("not a signature"))
		r := s.Do(apptest.Request{Method: http.MethodPost, Path: "/payments/webhook", Body: body, Header: map[string]string{
			payment.HeaderID: "msg_rot", payment.HeaderTimestamp: strings.TrimSpace(itoa(at.Unix())),
			payment.HeaderSignature: old + " v1,%%% " + junk + " " + good,
		}})
		if r.Status != http.StatusOK {
			t.Errorf("delivery %d: %d %s", i, r.Status, r.Body)
		}
		if b := getBooking(t, pool, id); b.Status != "CONFIRMED" {
			t.Errorf("delivery %d: booking %s, want CONFIRMED", i, b.Status)
		}
	}
	mustAudit(t, s)
}

// Money for a booking that another charge already confirmed, or that was
// cancelled, is recorded and refunded in full; the booking is untouched.
func TestMoneyForABookingThatCannotTakeIt(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	confirmed := hold(t, s, 7, flightID, "10A")
	first := paytest.Pay(t, s, confirmed)
	second := paytest.Pay(t, s, confirmed)
	cancelled := hold(t, s, 7, flightID, "10B")
	if r := s.Do(apptest.Request{Method: http.MethodDelete, Path: path("/bookings/%d", cancelled), Token: s.Token("customer", 7)}); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	afterCancel := paytest.Pay(t, s, cancelled)

	for _, c := range []struct {
		txn     string
		outcome string
		reason  string
	}{
		{first.ProviderTxnID, "confirmed", ""},
		// A second transaction for one booking is not the charge berth
		// started for it.
		{second.ProviderTxnID, "refund", payment.ReasonNotOurCharge},
		{afterCancel.ProviderTxnID, "refund", payment.ReasonNotHeld},
	} {
		if p := paymentOf(t, pool, c.txn); p.N != 1 || p.Outcome != c.outcome || p.Reason != c.reason {
			t.Errorf("payment %s: %+v, want %s %s", c.txn, p, c.outcome, c.reason)
		}
	}
	if n := events(t, pool, confirmed, outbox.BookingConfirmed); n != 1 {
		t.Errorf("%d booking.confirmed events, want 1", n)
	}
	if b := getBooking(t, pool, cancelled); b.Status != "CANCELLED" || b.CancelReason != "customer" {
		t.Errorf("cancelled booking %+v, want still CANCELLED by the customer", b)
	}
	settle(t, s, nil)
	st := s.App.PaySim.Stats()
	if st.RefundsPerCharge[second.ProviderTxnID] != 1 || st.RefundsPerCharge[afterCancel.ProviderTxnID] != 1 ||
		st.RefundsPerCharge[first.ProviderTxnID] != 0 {
		t.Errorf("gateway refunds per charge %v, want the second and the after-cancel charge once each", st.RefundsPerCharge)
	}
	mustAudit(t, s)
}

// A validly signed delivery berth cannot read or act on still gets 200 (the
// gateway would only send it again), records nothing, and is counted for
// operators.
func TestSignedButUnprocessableWebhooksAreAcknowledged(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	pool := s.App.Pool
	bodies := map[string][]byte{
		"not JSON":          []byte(`charge succeeded, trust me`),
		"negative amount":   []byte(`{"type":"charge.succeeded","data":{"bookingId":1,"providerTxnId":"tx-neg","amount":-5,"currency":"VND"}}`),
		"no transaction id": []byte(`{"type":"charge.succeeded","data":{"bookingId":1,"providerTxnId":"","amount":5,"currency":"VND"}}`),
		"no currency":       []byte(`{"type":"charge.succeeded","data":{"bookingId":1,"providerTxnId":"tx-cur","amount":5,"currency":"V"}}`),
		// A NUL in the id was a 500 (SQLSTATE 22021), retried for ever.
		"NUL in the transaction id": []byte(`{"type":"charge.succeeded","data":{"bookingId":1,"providerTxnId":"tx\u0000nul","amount":5,"currency":"VND"}}`),
		"NUL in a failure":          []byte(`{"type":"charge.failed","data":{"bookingId":1,"providerTxnId":"tx\u0000nul","amount":5,"currency":"VND"}}`),
		"control character":         []byte(`{"type":"refund.succeeded","data":{"bookingId":1,"providerTxnId":"rf\u001b[31m","amount":5,"currency":"VND"}}`),
		"bidi override":             []byte(`{"type":"charge.succeeded","data":{"bookingId":1,"providerTxnId":"tx\u202Eevil","amount":5,"currency":"VND"}}`),
		"not an ISO 4217 currency":  []byte(`{"type":"charge.succeeded","data":{"bookingId":1,"providerTxnId":"tx-xyz","amount":5,"currency":"XYZ"}}`),
	}
	for name, body := range bodies {
		h := paytest.Headers(paytest.Key(t), "msg_"+name, s.Clock.Now(), body)
		if r := s.Do(apptest.Request{Method: http.MethodPost, Path: "/payments/webhook", Body: body, Header: h}); r.Status != http.StatusOK {
			t.Errorf("%s: %d %s, want 200", name, r.Status, r.Body)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM payment`); n != 0 {
		t.Errorf("%d payments recorded, want none", n)
	}
	if n := webhooksCounted(t, s, "unprocessable"); n != float64(len(bodies)) {
		t.Errorf("%v deliveries counted unprocessable, want %d", n, len(bodies))
	}
}

// webhooksCounted is how many webhooks s counted with result.
func webhooksCounted(t *testing.T, s *apptest.Server, result string) float64 {
	t.Helper()
	mfs, err := s.App.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "berth_payment_webhooks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// Money of another amount or currency under the booking's own charge is
// refunded once, and ends the hold as a failed charge does: the booking's
// one charge is spent, so the hold could never be paid, and its seats go
// back on sale at once. The gateway's later word on the same transaction,
// the right money this time, is a duplicate and changes nothing.
func TestWrongMoneyForTheOwnChargeReleasesTheHold(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	for i, c := range []struct {
		name   string
		mutate func(d *payment.WebhookData)
		reason string
	}{
		{"wrong amount", func(d *payment.WebhookData) { d.Amount /= 2 }, payment.ReasonWrongAmount},
		{"wrong currency", func(d *payment.WebhookData) { d.Currency = "USD" }, payment.ReasonWrongCurrency},
	} {
		customer := int64(300 + i)
		seats := [][]string{{"10A", "10B"}, {"11A", "11B"}}[i]
		id := hold(t, s, customer, flightID, seats...)
		start := pay(s, customer, id, "pay-"+c.name)
		if start.Status != http.StatusCreated {
			t.Fatalf("%s: pay: %d %s", c.name, start.Status, start.Body)
		}
		right := payment.WebhookData{BookingID: id}
		if err := pool.QueryRow(t.Context(), `SELECT provider_txn_id, amount, currency FROM charge WHERE booking_id = $1`, id).
			Scan(&right.ProviderTxnID, &right.Amount, &right.Currency); err != nil {
			t.Fatal(err)
		}
		wrong := right
		c.mutate(&wrong)
		for range 2 { // a duplicate changes nothing
			if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, wrong); r.Status != http.StatusOK {
				t.Fatalf("%s: charge.succeeded: %d %s", c.name, r.Status, r.Body)
			}
		}
		if p := paymentOf(t, pool, right.ProviderTxnID); p.N != 1 || p.Outcome != "refund" || p.Reason != c.reason {
			t.Errorf("%s: payment %+v, want refunded as %s", c.name, p, c.reason)
		}
		if b := getBooking(t, pool, id); b.Status != "CANCELLED" || b.CancelReason != "payment_failed" || b.RefundStatus != "REQUESTED" {
			t.Errorf("%s: booking %+v, want CANCELLED payment_failed with its refund REQUESTED", c.name, b)
		}
		if n := events(t, pool, id, outbox.BookingCancelled); n != 1 {
			t.Errorf("%s: %d booking.cancelled events, want 1", c.name, n)
		}
		if n := events(t, pool, id, outbox.RefundRequested); n != 1 {
			t.Errorf("%s: %d refund.requested events, want 1", c.name, n)
		}
		for _, no := range seats {
			if st := seat(t, pool, flightID, no); st.Status != "AVAILABLE" || st.Booking != 0 {
				t.Errorf("%s: seat %s %+v, want AVAILABLE", c.name, no, st)
			}
		}
		if r := pay(s, customer, id, "pay-again-"+c.name); r.Status != http.StatusConflict || r.Code() != "invalid_state" {
			t.Errorf("%s: paying again: %d %s, want 409 invalid_state", c.name, r.Status, r.Body)
		}
		// The customer may hold the seats again, and pay for them.
		again := hold(t, s, customer, flightID, seats...)
		if r := pay(s, customer, again, "pay-new-"+c.name); r.Status != http.StatusCreated {
			t.Errorf("%s: paying a new hold: %d %s", c.name, r.Status, r.Body)
		}
		// The right money under the spent transaction is recorded nowhere
		// (a transaction is recorded once), but not taken for a duplicate:
		// it is counted, and logged, as a conflicting report.
		if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, right); r.Status != http.StatusOK {
			t.Fatalf("%s: charge.succeeded: %d %s", c.name, r.Status, r.Body)
		}
		if n := webhooksCounted(t, s, "conflicting"); n != float64(i+1) {
			t.Errorf("%s: %v reports counted conflicting, want %d", c.name, n, i+1)
		}
		if b := getBooking(t, pool, id); b.Status != "CANCELLED" {
			t.Errorf("%s: booking %s after the right money, want still CANCELLED", c.name, b.Status)
		}
	}
	if got := fareCounters(t, pool, flightID); got != (counters{Held: 4}) {
		t.Errorf("counters %+v, want only the two new holds", got)
	}
	settle(t, s, nil)
	if n := count(t, pool, `SELECT count(*) FROM refund WHERE status = 'SUCCEEDED'`); n != 2 {
		t.Errorf("%d refunds succeeded, want 2 (one per wrong payment)", n)
	}
	if st := s.App.PaySim.Stats(); st.Refunds != 2 {
		t.Errorf("the gateway made %d refunds, want 2", st.Refunds)
	}
	mustAudit(t, s)
}
