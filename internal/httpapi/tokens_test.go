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
	if n := tc.size(); n != 1 {
		t.Fatalf("%d tokens cached, want 1", n)
	}
	if _, err := tc.verify(secret, tok, now.Add(time.Hour)); !errors.Is(err, auth.ErrInvalid) {
		t.Errorf("cached token past its expiry: err = %v, want ErrInvalid", err)
	}
	if _, err := tc.verify([]byte("another-secret-entirely"), tok+"x", now); err == nil {
		t.Error("a forged token verified")
	}
	if n := tc.size(); n != 1 {
		t.Errorf("%d tokens cached after a forged one, want 1", n)
	}
}

// size is how many tokens the cache holds.
func (tc *tokenCache) size() int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return len(tc.cur) + len(tc.prev)
}

// A flood of new tokens (a sale's crowd, or someone minting tokens to fill
// the server's memory) never makes the cache hold more than two
// generations, and a token in steady use stays cached through the flood.
func TestTokenCacheIsBoundedUnderAFloodOfNewTokens(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef-secret")
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tc := newTokenCache()
	regular, err := auth.Issue(secret, 1, auth.Customer, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const flood = 5*maxCachedTokens + 1
	peak := 0
	for i := range flood {
		tok, err := auth.Issue(secret, int64(i+2), auth.Customer, now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tc.verify(secret, tok, now); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 { // the regular customer polls now and then
			if _, err := tc.verify(secret, regular, now); err != nil {
				t.Fatal(err)
			}
		}
		peak = max(peak, tc.size())
	}
	if peak > 2*maxCachedTokens {
		t.Errorf("the cache held %d tokens, want at most %d", peak, 2*maxCachedTokens)
	}
	tc.mu.Lock()
	_, inCur := tc.cur[regular]
	_, inPrev := tc.prev[regular]
	tc.mu.Unlock()
	if !inCur && !inPrev {
		t.Error("a token in steady use fell out of the cache")
	}
}

// BenchmarkTokenCacheMiss is a request whose token the cache has not seen
// (a sale's crowd arriving): the verification and the cache's insert.
func BenchmarkTokenCacheMiss(b *testing.B) {
	secret := []byte("0123456789abcdef-secret")
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	// More tokens than the cache's two generations hold, taken in turn:
	// each has left the cache before its turn comes again.
	toks := make([]string, 3*maxCachedTokens)
	for i := range toks {
		tok, err := auth.Issue(secret, int64(i+1), auth.Customer, now, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		toks[i] = tok
	}
	tc := newTokenCache()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := tc.verify(secret, toks[i%len(toks)], now); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
