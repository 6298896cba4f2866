package events

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"berth.dev/berth/internal/clock"
)

// Hook posts JSON to a URL, signed like the Standard Webhooks
// specification (the scheme berth itself checks on gateway webhooks):
// headers webhook-id, webhook-timestamp (Unix seconds) and
// webhook-signature "v1,<base64 HMAC-SHA256 of id.timestamp.body>". The
// id is the same on every retry of one message, so the receiver can
// deduplicate. A transport error, 408, 429 or 5xx is retried with
// exponential backoff, up to Attempts tries in all; any other non-2xx
// answer fails at once.
type Hook struct {
	URL    string
	Key    []byte // HMAC key: the decoded bytes of a whsec_ secret
	Client *http.Client
	Clock  clock.Clock
	// Attempts bounds the tries of one Post; BaseBackoff doubles after each.
	Attempts    int
	BaseBackoff time.Duration
}

// NewHook returns a hook for url with key and the usual retry rules: 4
// tries, 200 ms doubling, 10 s per request.
func NewHook(url string, key []byte, c clock.Clock) *Hook {
	return &Hook{URL: url, Key: key, Client: &http.Client{Timeout: 10 * time.Second}, Clock: c,
		Attempts: 4, BaseBackoff: 200 * time.Millisecond}
}

// Sign returns the webhook-signature header value of a message.
func Sign(key []byte, id string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	_, _ = fmt.Fprintf(mac, "%s.%d.", id, ts)
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Post sends body with message id id, retrying as described on Hook.
func (h *Hook) Post(ctx context.Context, id string, body []byte) error {
	var err error
	for attempt := 1; attempt <= max(h.Attempts, 1); attempt++ {
		if attempt > 1 {
			wait := h.BaseBackoff << (attempt - 2)
			select {
			case <-ctx.Done():
				return fmt.Errorf("post %s to %s: %w (last error: %w)", id, h.URL, ctx.Err(), err)
			case <-time.After(wait):
			}
		}
		var retry bool
		retry, err = h.post(ctx, id, body)
		if err == nil || !retry {
			return err
		}
	}
	return fmt.Errorf("post %s to %s: gave up after %d attempts: %w", id, h.URL, h.Attempts, err)
}

func (h *Hook) post(ctx context.Context, id string, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("post %s: %w", id, err)
	}
	ts := h.Clock.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", Sign(h.Key, id, ts, body))
	resp, err := h.Client.Do(req)
	if err != nil {
		return true, fmt.Errorf("post %s to %s: %w", id, h.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500:
		return true, fmt.Errorf("post %s to %s: %s", id, h.URL, resp.Status)
	default:
		return false, fmt.Errorf("post %s to %s: %s", id, h.URL, resp.Status)
	}
}
