package payment_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/payment"
)

// FuzzVerify feeds the webhook verifier arbitrary headers and bodies: it
// never panics, and it accepts a delivery only when one of its v1
// signatures is the one berth computes for that id, timestamp and body.
func FuzzVerify(f *testing.F) {
	key := []byte("fuzz-webhook-key-0123456789")
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	body := []byte(`{"type":"charge.succeeded","data":{"bookingId":1,"providerTxnId":"txn_1","amount":1500,"currency":"VND"}}`)
	h := http.Header{}
	payment.SignHeaders(h, key, "msg_1", now, body)
	sig := h.Get(payment.HeaderSignature)
	f.Add("msg_1", h.Get(payment.HeaderTimestamp), sig, body)
	f.Add("msg_1", h.Get(payment.HeaderTimestamp), "v1,AAAA "+sig, body)
	f.Add("msg_1", h.Get(payment.HeaderTimestamp), "v2,"+strings.TrimPrefix(sig, "v1,"), body)
	f.Add("msg_1", "-9223372036854775808", sig, body)
	f.Add("msg_1", "99999999999999999999", sig, body)
	f.Add("", "", "", []byte{})
	f.Add("msg_2", h.Get(payment.HeaderTimestamp), "v1,", []byte("\x00"))
	f.Fuzz(func(t *testing.T, id, ts, sigs string, body []byte) {
		h := http.Header{}
		h.Set(payment.HeaderID, id)
		h.Set(payment.HeaderTimestamp, ts)
		h.Set(payment.HeaderSignature, sigs)
		if payment.Verify(key, h, body, now) != nil {
			return
		}
		at, ok := parseUnix(ts)
		if !ok {
			t.Fatalf("accepted timestamp %q", ts)
		}
		want := http.Header{}
		payment.SignHeaders(want, key, id, at, body)
		if !strings.Contains(" "+sigs+" ", " "+want.Get(payment.HeaderSignature)+" ") &&
			!strings.Contains(sigs, strings.TrimPrefix(want.Get(payment.HeaderSignature), "v1,")) {
			t.Fatalf("accepted %q for id %q, ts %q, body %q without its signature %s", sigs, id, ts, body, want.Get(payment.HeaderSignature))
		}
	})
}

func parseUnix(s string) (time.Time, bool) {
	var n int64
	if s == "" {
		return time.Time{}, false
	}
	neg := false
	if s[0] == '-' || s[0] == '+' {
		neg, s = s[0] == '-', s[1:]
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return time.Time{}, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return time.Unix(n, 0), true
}
