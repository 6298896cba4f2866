package paysim_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paysim"
)

var key = []byte("paysim-test-key-0123456789")

// receiver records the webhooks it is sent, verifying each signature.
type receiver struct {
	t    *testing.T
	now  time.Time
	mu   sync.Mutex
	msgs map[string][]payment.Webhook // by webhook-id
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if err := payment.Verify(key, req.Header, body, r.now); err != nil {
		r.t.Errorf("webhook signature: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var wh payment.Webhook
	if err := json.Unmarshal(body, &wh); err != nil {
		r.t.Errorf("webhook body %s: %v", body, err)
	}
	r.mu.Lock()
	r.msgs[req.Header.Get(payment.HeaderID)] = append(r.msgs[req.Header.Get(payment.HeaderID)], wh)
	r.mu.Unlock()
}

// post calls the simulated gateway's own API (not berth's), raw.
func post(t *testing.T, url, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// The protocol over HTTP: one charge per idempotency key, a checkout page,
// signed webhooks (duplicated under one webhook-id), refunds once per key.
func TestSimulatorProtocol(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	rcv := &receiver{t: t, now: now, msgs: map[string][]payment.Webhook{}}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	sim := paysim.New(paysim.Options{Key: key, Clock: clock.NewFake(now), MaxDeliveries: 3, Reorder: 5 * time.Millisecond})
	t.Cleanup(sim.Close)
	gw := httptest.NewServer(sim.Handler())
	t.Cleanup(gw.Close)
	sim.SetBaseURL(gw.URL)

	charge := `{"bookingId": 7, "amount": 1500, "currency": "VND", "webhookUrl": "` + hook.URL + `"}`
	if st, _ := post(t, gw.URL+"/charges", "", charge); st != http.StatusBadRequest {
		t.Errorf("charge without a key: %d, want 400", st)
	}
	st, first := post(t, gw.URL+"/charges", "c-1", charge)
	st2, again := post(t, gw.URL+"/charges", "c-1", charge)
	if st != http.StatusCreated || st2 != http.StatusCreated || first["providerTxnId"] != again["providerTxnId"] {
		t.Fatalf("same key twice: %d %v, %d %v; want one charge", st, first, st2, again)
	}
	txn := first["providerTxnId"].(string)
	page, err := http.Get(first["checkoutUrl"].(string))
	if err != nil {
		t.Fatal(err)
	}
	html, _ := io.ReadAll(page.Body)
	_ = page.Body.Close()
	if page.StatusCode != http.StatusOK || !strings.Contains(string(html), "1,500 VND") {
		t.Errorf("checkout page: %d %s", page.StatusCode, html)
	}
	if st, _ := post(t, first["checkoutUrl"].(string)+"/pay", "", ""); st != http.StatusOK {
		t.Errorf("click pay: %d", st)
	}
	if sim.Settle(txn, false) {
		t.Error("a decided charge was decided again")
	}
	refund := `{"providerTxnId": "` + txn + `", "bookingId": 7, "amount": 500, "currency": "VND", "webhookUrl": "` + hook.URL + `"}`
	_, r1 := post(t, gw.URL+"/refunds", "r-1", refund)
	_, r2 := post(t, gw.URL+"/refunds", "r-1", refund)
	if r1["refundId"] == nil || r1["refundId"] != r2["refundId"] {
		t.Errorf("refund twice under one key: %v, %v", r1, r2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sim.Idle(ctx); err != nil {
		t.Fatal(err)
	}
	stats := sim.Stats()
	if stats.Charges != 1 || stats.Succeeded != 1 || stats.Refunds != 1 || stats.RefundedAmount[txn] != 500 {
		t.Errorf("stats %+v", stats)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.msgs) != 2 {
		t.Fatalf("%d distinct webhooks, want charge.succeeded and refund.succeeded", len(rcv.msgs))
	}
	types := map[string]bool{}
	for id, copies := range rcv.msgs {
		if len(copies) < 1 || len(copies) > 3 {
			t.Errorf("webhook %s delivered %d times, want 1 to 3", id, len(copies))
		}
		for _, c := range copies {
			if c != copies[0] {
				t.Errorf("copies of %s differ: %+v", id, copies)
			}
		}
		types[copies[0].Type] = true
	}
	if !types[payment.ChargeSucceeded] || !types[payment.RefundSucceeded] {
		t.Errorf("webhook types %v", types)
	}
}

// A webhook is retried until berth takes it, well past a dozen refusals
// (berth or its database down for a while): money taken meanwhile still
// reaches berth, to be confirmed or refunded.
func TestWebhookRetriedUntilTaken(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var (
		mu       sync.Mutex
		refusals int
		taken    int
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if refusals < 30 {
			refusals++
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		taken++
	}))
	t.Cleanup(hook.Close)
	sim := paysim.New(paysim.Options{Key: key, Clock: clock.NewFake(now), Auto: true, RetryWait: 5 * time.Millisecond})
	t.Cleanup(sim.Close)
	if _, err := sim.Charge(context.Background(), "c-1", payment.ChargeRequest{BookingID: 7, Amount: 1500, Currency: "VND", WebhookURL: hook.URL}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sim.Idle(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if refusals != 30 || taken != 1 {
		t.Errorf("%d refusals, then taken %d times; want 30, then once", refusals, taken)
	}
}
