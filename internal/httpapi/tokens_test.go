package httpapi

import (
	"errors"
	"testing"
	"time"

	"berth.dev/berth/internal/auth"
)

// A cached token is still refused once it expires, and a forged one is
// never cached.
func TestTokenCacheKeepsExpiryAndSignature(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef-secret")
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tok, err := auth.Issue(secret, 42, auth.Customer, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tc := newTokenCache()
	for range 2 { // a miss, then a hit
		c, err := tc.verify(secret, tok, now.Add(30*time.Minute))
		if err != nil || c.ID != 42 || c.Role != auth.Customer {
			t.Fatalf("verify: %+v, %v", c, err)
		}
	}
	if len(tc.m) != 1 {
		t.Fatalf("%d tokens cached, want 1", len(tc.m))
	}
	if _, err := tc.verify(secret, tok, now.Add(time.Hour)); !errors.Is(err, auth.ErrInvalid) {
		t.Errorf("cached token past its expiry: err = %v, want ErrInvalid", err)
	}
	if _, err := tc.verify([]byte("another-secret-entirely"), tok+"x", now); err == nil {
		t.Error("a forged token verified")
	}
	if len(tc.m) != 1 {
		t.Errorf("%d tokens cached after a forged one, want 1", len(tc.m))
	}
}
