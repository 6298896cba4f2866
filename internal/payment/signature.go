package payment

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"berth.dev/berth/internal/fault"
)

// Headers of a signed webhook delivery (Standard Webhooks).
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Tolerance is how far a webhook's timestamp may be from the server's clock,
// either way, before the delivery is refused as a replay or a forgery.
const Tolerance = 5 * time.Minute

// Sign returns the webhook-signature value for a delivery: "v1," and the
// base64 HMAC-SHA256 of "{id}.{timestamp}.{body}" under key.
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, timestamp, body))
}

// SignHeaders sets the three signature headers of a delivery on h.
func SignHeaders(h http.Header, key []byte, id string, at time.Time, body []byte) {
	ts := at.Unix()
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, Sign(key, id, ts, body))
}

func mac(key []byte, id string, timestamp int64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.FormatInt(timestamp, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a delivery's signature headers against body: a timestamp
// within Tolerance of now (either way), and at least one "v1," signature
// among the space-separated ones that matches, compared in constant time.
// Several signatures let the gateway rotate its secret. Returns
// fault.Unauthenticated otherwise.
func Verify(key []byte, h http.Header, body []byte, now time.Time) error {
	id, tsText, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || tsText == "" || sigs == "" {
		return fault.New(fault.Unauthenticated, "the webhook-id, webhook-timestamp and webhook-signature headers are required")
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fault.New(fault.Unauthenticated, "webhook-timestamp must be Unix seconds")
	}
	at := time.Unix(ts, 0)
	if at.Before(now.Add(-Tolerance)) || at.After(now.Add(Tolerance)) {
		return fault.New(fault.Unauthenticated, "webhook-timestamp is more than %s away from the server's clock", Tolerance)
	}
	want := mac(key, id, ts, body)
	ok := false
	for _, s := range strings.Fields(sigs) {
		version, b64, found := strings.Cut(s, ",")
		if !found || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		// Check every signature, not only up to the first match, so the
		// time taken says nothing about which one matched.
		if hmac.Equal(got, want) {
			ok = true
		}
	}
	if !ok {
		return fault.New(fault.Unauthenticated, "no valid webhook signature")
	}
	return nil
}
