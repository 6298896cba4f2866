package paysim

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"berth.dev/berth/internal/payment"
)

// The pages show amounts as a customer reads them, in the currency's major
// unit, and say when a succeeded charge's money went back.
func TestPagesShowMoneyAsPeopleReadIt(t *testing.T) {
	for _, c := range []struct {
		amount   int64
		currency string
		want     string
	}{
		{1500000, "VND", "1,500,000 VND"},
		{1250, "EUR", "12.50 EUR"},
		{5, "EUR", "0.05 EUR"},
		{123456789, "USD", "1,234,567.89 USD"},
		{1000, "JPY", "1,000 JPY"},
		{1234, "KWD", "1.234 KWD"},
		{0, "VND", "0 VND"},
	} {
		if got := formatAmount(c.amount, c.currency); got != c.want {
			t.Errorf("formatAmount(%d, %s) = %q, want %q", c.amount, c.currency, got, c.want)
		}
	}
	ch := &charge{req: payment.ChargeRequest{Amount: 2000, Currency: "VND"}, state: succeeded}
	for _, c := range []struct {
		refunded int64
		want     string
	}{{0, "succeeded"}, {500, "partly refunded (500 VND)"}, {2000, "refunded"}} {
		if got := chargeStatus(ch, c.refunded); got != c.want {
			t.Errorf("a charge of 2000 with %d refunded shows %q, want %q", c.refunded, got, c.want)
		}
	}
	if got := bookingPage("http://127.0.0.1:8080/payments/webhook", 42); got != "http://127.0.0.1:8080/app/bookings/42" {
		t.Errorf("back link %q", got)
	}
	if got := bookingPage("javascript:alert(1)", 42); got != "" {
		t.Errorf("back link from a non-web URL: %q, want none", got)
	}
}

// A checkout page that does not exist is a page saying so to a browser,
// and a problem document to a program.
func TestMissingCheckoutAnswersEachReader(t *testing.T) {
	h := New(Options{}).Handler()
	for _, c := range []struct{ method, path, accept, want string }{
		{http.MethodGet, "/checkout/nope", "", "application/problem+json"},
		{http.MethodPost, "/checkout/nope/pay", "application/json", "application/problem+json"},
		{http.MethodPost, "/checkout/nope/refund", "", "application/problem+json"},
		{http.MethodGet, "/checkout/nope", "text/html,application/xhtml+xml,*/*;q=0.8", "text/html; charset=utf-8"},
		{http.MethodPost, "/checkout/nope/pay", "text/html", "text/html; charset=utf-8"},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(c.method, c.path, nil)
		if c.accept != "" {
			r.Header.Set("Accept", c.accept)
		}
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusNotFound || rec.Header().Get("Content-Type") != c.want {
			t.Errorf("%s %s (Accept %q): %d %s, want 404 %s", c.method, c.path, c.accept, rec.Code, rec.Header().Get("Content-Type"), c.want)
		}
		if c.want == "application/problem+json" && !strings.Contains(rec.Body.String(), `"code":"not_found"`) {
			t.Errorf("%s %s: %s, want a not_found problem", c.method, c.path, rec.Body)
		}
	}
}
