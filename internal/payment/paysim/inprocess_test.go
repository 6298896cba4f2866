package paysim_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paysim"
)

// In process (BERTH_PAYSIM=on), the simulator sends every webhook to berth
// itself, whatever URL a caller gives, and serves only the checkout pages:
// no gateway protocol for strangers to create charges with, no list of
// everyone's charges.
func TestInProcessWebhooksGoToBerthOnly(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	berth := &receiver{t: t, now: now, msgs: map[string][]payment.Webhook{}}
	attacker := &receiver{t: t, now: now, msgs: map[string][]payment.Webhook{}}
	bs, as := httptest.NewServer(berth), httptest.NewServer(attacker)
	t.Cleanup(bs.Close)
	t.Cleanup(as.Close)
	sim := paysim.New(paysim.Options{Key: key, Clock: clock.NewFake(now), InProcess: true})
	t.Cleanup(sim.Close)
	sim.SetWebhookURL(bs.URL)
	res, _ := sim.Charge(context.Background(), "k1", payment.ChargeRequest{BookingID: 1, Amount: 100, Currency: "VND", WebhookURL: as.URL})
	sim.Settle(res.ProviderTxnID, true)
	_, _ = sim.Refund(context.Background(), "r1", payment.GatewayRefundRequest{ProviderTxnID: res.ProviderTxnID, BookingID: 1, Amount: 100,
		Currency: "VND", WebhookURL: as.URL})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sim.Idle(ctx); err != nil {
		t.Fatal(err)
	}
	berth.mu.Lock()
	got := len(berth.msgs)
	berth.mu.Unlock()
	attacker.mu.Lock()
	stolen := len(attacker.msgs)
	attacker.mu.Unlock()
	if got != 2 || stolen != 0 {
		t.Errorf("berth got %d webhooks, the caller's URL %d; want 2 and 0", got, stolen)
	}

	gw := httptest.NewServer(sim.Handler())
	t.Cleanup(gw.Close)
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/", http.StatusNotFound},
		{http.MethodPost, "/charges", http.StatusNotFound},
		{http.MethodPost, "/refunds", http.StatusNotFound},
		{http.MethodGet, "/checkout/" + res.ProviderTxnID, http.StatusOK},
		{http.MethodPost, "/checkout/" + res.ProviderTxnID + "/steal", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(c.method, gw.URL+c.path, strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "x")
		req.Header.Set("Accept", "text/html")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s in process: %d, want %d", c.method, c.path, resp.StatusCode, c.want)
		}
		// A person reads the checkout's pages, its 404s too (a program
		// gets a problem: TestMissingCheckoutAnswersEachReader).
		if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(c.path, "/checkout/") && !strings.HasPrefix(ct, "text/html") {
			t.Errorf("%s %s in process: Content-Type %q, want text/html", c.method, c.path, ct)
		}
	}
}

// However many charges are made, the simulator keeps at most MaxCharges
// (decided ones are forgotten first), and its memory stays bounded.
func TestChargesAreBounded(t *testing.T) {
	t.Parallel()
	sim := paysim.New(paysim.Options{Key: key, MaxCharges: 100, InProcess: true, WebhookURL: "http://127.0.0.1:1/"})
	t.Cleanup(sim.Close)
	ctx := context.Background()
	big := strings.Repeat("x", 60<<10) // what an attacker's 60 KB charge carried
	var first string
	for i := range 300 {
		res, _ := sim.Charge(ctx, fmt.Sprint("k", i), payment.ChargeRequest{BookingID: int64(i), Amount: 1, Currency: "VND", WebhookURL: big})
		if i == 0 {
			first = res.ProviderTxnID
		}
		_, _ = sim.Refund(ctx, fmt.Sprint("r", i), payment.GatewayRefundRequest{ProviderTxnID: res.ProviderTxnID, Amount: 1, Currency: "VND"})
	}
	sim.Close()
	if n := len(sim.PendingCharges()); n > 100 {
		t.Errorf("%d charges kept, want at most 100", n)
	}
	if sim.Settle(first, true) {
		t.Error("the oldest charge is still kept")
	}
	if st := sim.Stats(); len(st.RefundsPerCharge) > 200 {
		t.Errorf("%d refund counters kept, want bounded", len(st.RefundsPerCharge))
	}
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	t.Logf("heap in use after 300 × 60 KB charges with a bound of 100: %d KiB", m.HeapInuse>>10)
}
