package httpapi

import (
	"sync"
	"time"

	"berth.dev/berth/internal/auth"
)

// tokenCache remembers bearer tokens already verified, so that a client
// asking again and again during a sale (the waiting room, the gate) costs a
// map lookup instead of a JWT parse and HMAC: that parse was a fifth of the
// CPU of a rejected request. A token is a signed, immutable string, so one
// that verified once verifies again until it expires, and the expiry is
// checked on every use.
//
// It keeps two generations of at most maxCachedTokens each: new tokens go
// into cur; when cur is full it becomes prev and a fresh cur starts, and a
// token found in prev moves back to cur. So the tokens in use stay cached,
// a flood of new tokens (a sale's crowd, or an attacker minting them) never
// holds more than 2 x maxCachedTokens, and the memory of the old generation
// is given back when it is dropped (a cleared Go map keeps its buckets).
type tokenCache struct {
	mu   sync.Mutex
	cur  map[string]cachedToken
	prev map[string]cachedToken
}

type cachedToken struct {
	caller  auth.Caller
	expires time.Time
}

// maxCachedTokens bounds each generation (a token is a few hundred bytes,
// so the cache stays under ten megabytes).
const maxCachedTokens = 10_000

func newTokenCache() *tokenCache { return &tokenCache{cur: make(map[string]cachedToken)} }

// verify returns who token speaks for, as auth.Verify would at now.
func (tc *tokenCache) verify(secret []byte, token string, now time.Time) (auth.Caller, error) {
	tc.mu.Lock()
	e, ok := tc.cur[token]
	if !ok {
		if e, ok = tc.prev[token]; ok {
			tc.put(token, e)
		}
	}
	tc.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.caller, nil
	}
	c, exp, err := auth.VerifyUntil(secret, token, now)
	if err != nil {
		return c, err
	}
	tc.mu.Lock()
	tc.put(token, cachedToken{caller: c, expires: exp})
	tc.mu.Unlock()
	return c, nil
}

// put adds a token to the current generation, starting a new one when it is
// full. The caller holds mu.
func (tc *tokenCache) put(token string, e cachedToken) {
	if len(tc.cur) >= maxCachedTokens {
		tc.prev, tc.cur = tc.cur, make(map[string]cachedToken, maxCachedTokens/4)
	}
	tc.cur[token] = e
}
