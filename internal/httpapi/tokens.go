package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"berth.dev/berth/internal/auth"
)

// tokenCache remembers bearer tokens already verified, so that a client
// asking again and again during a sale (the waiting room, the gate) costs a
// map lookup instead of a JWT parse and HMAC: that parse was a fifth of the
// CPU of a rejected request. A token is a signed, immutable string, so one
// that verified once verifies again until it expires, and the expiry is
// checked on every use. Bounded: when full it starts over.
type tokenCache struct {
	mu sync.Mutex
	m  map[string]cachedToken
}

type cachedToken struct {
	caller  auth.Caller
	expires time.Time
}

// maxCachedTokens bounds the cache (a token is a few hundred bytes).
const maxCachedTokens = 100_000

func newTokenCache() *tokenCache { return &tokenCache{m: make(map[string]cachedToken)} }

// verify returns who token speaks for, as auth.Verify would at now.
func (tc *tokenCache) verify(secret []byte, token string, now time.Time) (auth.Caller, error) {
	tc.mu.Lock()
	e, ok := tc.m[token]
	tc.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.caller, nil
	}
	c, err := auth.Verify(secret, token, now)
	if err != nil {
		return c, err
	}
	if exp, ok := expiry(token); ok {
		tc.mu.Lock()
		if len(tc.m) >= maxCachedTokens {
			clear(tc.m)
		}
		tc.m[token] = cachedToken{caller: c, expires: exp}
		tc.mu.Unlock()
	}
	return c, nil
}

// expiry reads the exp claim of a token that auth.Verify accepted.
func expiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	f, err := claims.Exp.Float64()
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(int64(f), 0), true
}
