package payment_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paytest"
)

// Every event of a booking carries the booking as GET /bookings/{id}
// answers (its id, status and version), refund events too, with the
// refund as data.refund: a booking confirmed, cancelled with a refund by
// its rule, then paid again (stray money, refunded in full), both refunds
// completed.
func TestEveryEventCarriesTheBooking(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	flightID := refunds80(t, s, "VN901")
	id := hold(t, s, 7, flightID, "10A", "10B")
	paytest.Pay(t, s, id)
	s.Customer(7).Cancel(t, id)
	stray := paytest.Foreign(t, s.App.Pool, id)
	if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, stray); r.Status != http.StatusOK {
		t.Fatalf("stray charge.succeeded: %d %s", r.Status, r.Body)
	}
	settle(t, s, nil)

	r := s.Do(apptest.Request{Method: http.MethodGet, Path: path("/bookings/%d/events", id), Token: s.Token("customer", 7)})
	if r.Status != http.StatusOK {
		t.Fatalf("GET events: %d %s", r.Status, r.Body)
	}
	var got struct {
		Events []struct {
			Type string `json:"type"`
			Data struct {
				BookingID int64  `json:"bookingId"`
				Status    string `json:"status"`
				Version   int    `json:"version"`
				Amount    int64  `json:"amount"`
				Refund    *struct {
					Amount   int64  `json:"amount"`
					Currency string `json:"currency"`
					Reason   string `json:"reason"`
				} `json:"refund"`
			} `json:"data"`
		} `json:"events"`
	}
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Fatalf("GET events: %v: %s", err, r.Body)
	}
	cancelRefund := int64(2*price) * 80 / 100
	want := map[string][]int64{ // type → the refunds' amounts
		outbox.RefundRequested: {cancelRefund, stray.Amount},
		outbox.RefundCompleted: {cancelRefund, stray.Amount},
	}
	seen := map[string][]int64{}
	var types []string
	for i, e := range got.Events {
		d := e.Data
		types = append(types, e.Type)
		if d.BookingID != id || d.Status == "" || d.Version < 1 || d.Amount != 2*price {
			t.Errorf("event %d (%s): data bookingId %d, status %q, version %d, amount %d; want booking %d's, amount %d",
				i, e.Type, d.BookingID, d.Status, d.Version, d.Amount, id, 2*price)
		}
		if _, isRefund := want[e.Type]; !isRefund {
			if d.Refund != nil {
				t.Errorf("event %d (%s) has a refund", i, e.Type)
			}
			continue
		}
		if d.Refund == nil || d.Refund.Currency != "VND" {
			t.Errorf("event %d (%s): refund %+v, want one in VND", i, e.Type, d.Refund)
			continue
		}
		if d.Status != "CANCELLED" {
			t.Errorf("event %d (%s): status %s, want CANCELLED", i, e.Type, d.Status)
		}
		seen[e.Type] = append(seen[e.Type], d.Refund.Amount)
	}
	for typ, amounts := range want {
		// The two refunds may complete in either order.
		slices.Sort(seen[typ])
		slices.Sort(amounts)
		if !slices.Equal(seen[typ], amounts) {
			t.Errorf("%s refunds %v, want %v (events %v)", typ, seen[typ], amounts, types)
		}
	}
	mustAudit(t, s)
}

// Money for no booking has no booking to carry: its refund.requested has
// the id and the refund only.
func TestRefundOfMoneyForNoBooking(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	const nobody = 987654
	d := payment.WebhookData{BookingID: nobody, ProviderTxnID: "txn_nobody", Amount: 5000, Currency: "VND"}
	if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, d); r.Status != http.StatusOK {
		t.Fatalf("charge.succeeded: %d %s", r.Status, r.Body)
	}
	var data map[string]any
	if err := s.App.Pool.QueryRow(t.Context(), `SELECT payload FROM outbox WHERE booking_id = $1 AND type = $2`,
		nobody, outbox.RefundRequested).Scan(&data); err != nil {
		t.Fatal(err)
	}
	refund, _ := data["refund"].(map[string]any)
	if len(data) != 2 || data["bookingId"] != float64(nobody) || refund == nil || refund["amount"] != float64(5000) ||
		refund["reason"] != payment.ReasonUnknownBooking || refund["providerTxnId"] != d.ProviderTxnID {
		t.Errorf("refund.requested of money for no booking: %v, want only bookingId and the refund", data)
	}
	settle(t, s, nil)
	if n := count(t, s.App.Pool, `SELECT count(*) FROM refund WHERE booking_id = $1 AND amount = 5000 AND status = 'SUCCEEDED'`, nobody); n != 1 {
		t.Errorf("%d refunds of the money completed, want 1", n)
	}
	mustAudit(t, s)
}

// Events written by an earlier release, whose data is the refund itself,
// are still read: the audit counts the refund such an event owes, and the
// refunds consumer refunds it, of the refund's amount (not the booking's).
func TestRefundEventOfAnEarlierRelease(t *testing.T) {
	t.Parallel()
	// No consumer in the server: the test hands the event over itself,
	// after rewriting it.
	s := start(t, func(c *config.Config) { c.Events.InServe = false })
	pool := s.App.Pool
	flightID := refunds80(t, s, "VN902")
	id := hold(t, s, 7, flightID, "10A", "10B")
	charge := paytest.Pay(t, s, id)
	s.Customer(7).Cancel(t, id)
	// Owed, not yet recorded: the audit counts it from the event, by its
	// refund (its top-level amount is the booking's, 2 × price).
	mustAudit(t, s)
	// As the earlier release wrote it: the refund as the whole data.
	if _, err := pool.Exec(t.Context(), `UPDATE outbox SET payload = payload->'refund'
		WHERE booking_id = $1 AND type = $2`, id, outbox.RefundRequested); err != nil {
		t.Fatal(err)
	}
	want := int64(2*price) * 80 / 100
	if n := count(t, pool, `SELECT count(*) FROM outbox WHERE booking_id = $1 AND type = $2
		AND payload->>'amount' = $3 AND NOT payload ? 'refund'`, id, outbox.RefundRequested, itoa(want)); n != 1 {
		t.Fatalf("%d refund.requested events in the earlier shape, want 1", n)
	}
	mustAudit(t, s)
	settle(t, s, nil)
	if n := count(t, pool, `SELECT count(*) FROM refund WHERE booking_id = $1 AND amount = $2 AND reason = 'cancelled_by_customer'`,
		id, want); n != 1 {
		t.Errorf("%d refunds of %d recorded from the earlier event, want 1", n, want)
	}
	if st := s.App.PaySim.Stats(); st.RefundedAmount[charge.ProviderTxnID] != want {
		t.Errorf("the gateway refunded %d, want %d", st.RefundedAmount[charge.ProviderTxnID], want)
	}
	mustAudit(t, s)
}

// While a rolling upgrade from an earlier release runs, this release
// writes refund events in the earlier shape (BERTH_REFUND_EVENT_DATA=
// refund), the refund as the whole data, which the earlier release's
// refunds consumer reads; this release's consumer reads it too.
func TestRefundEventsInTheEarlierShapeForARollout(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *config.Config) { c.Events.RefundData = "refund" })
	pool := s.App.Pool
	flightID := refunds80(t, s, "VN903")
	id := hold(t, s, 7, flightID, "10A", "10B")
	charge := paytest.Pay(t, s, id)
	s.Customer(7).Cancel(t, id)
	stray := paytest.Foreign(t, pool, id)
	if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, stray); r.Status != http.StatusOK {
		t.Fatalf("stray charge.succeeded: %d %s", r.Status, r.Body)
	}
	settle(t, s, nil)
	want := int64(2*price) * 80 / 100
	for _, c := range []struct {
		typ    string
		amount int64
	}{{outbox.RefundRequested, want}, {outbox.RefundRequested, stray.Amount}, {outbox.RefundCompleted, want}, {outbox.RefundCompleted, stray.Amount}} {
		if n := count(t, pool, `SELECT count(*) FROM outbox WHERE booking_id = $1 AND type = $2
			AND payload->>'amount' = $3 AND NOT payload ? 'refund' AND NOT payload ? 'status'`, id, c.typ, itoa(c.amount)); n != 1 {
			t.Errorf("%d %s events of %d in the earlier shape, want 1", n, c.typ, c.amount)
		}
	}
	if st := s.App.PaySim.Stats(); st.RefundedAmount[charge.ProviderTxnID] != want || st.RefundedAmount[stray.ProviderTxnID] != stray.Amount {
		t.Errorf("the gateway refunded %d and %d, want %d and %d", st.RefundedAmount[charge.ProviderTxnID],
			st.RefundedAmount[stray.ProviderTxnID], want, stray.Amount)
	}
	mustAudit(t, s)
}

// refunds80 creates flight code, departing 48 h after the tests' epoch,
// whose economy fare refunds 80 % until 24 h before departure: a
// cancellation now refunds 80 % of the price.
func refunds80(t *testing.T, s *apptest.Server, code string) int64 {
	t.Helper()
	keeps80 := 80
	return s.Admin().CreateFlight(t, apptest.Flight{Code: code, DepartureAt: apptest.Epoch.Add(48 * time.Hour),
		Fares: []apptest.Fare{{Class: "ECONOMY", Price: price, Capacity: 9, Seats: apptest.Seats(10, 12, "ABC"),
			Refundable: &keeps80, RefundCutoff: "24h"}}}).ID
}
