package guard

import (
	"context"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"golang.org/x/time/rate"

	"berth.dev/berth/internal/fault"
)

// Rate limits, shared by every berth process through Redis (GCRA, from
// go-redis/redis_rate), falling back to per-process limits
// (golang.org/x/time/rate) while Redis is unreachable. Both count on the
// real clock: Redis's own in the shared case.

// Rate is a limit of N per Window; the zero Rate is no limit.
type Rate struct {
	N      int
	Window time.Duration
}

// Off reports whether r sets no limit.
func (r Rate) Off() bool { return r.N == 0 }

// maxLocalKeys bounds the per-process limiters and leases kept in memory.
const maxLocalKeys = 100_000

// RequestLimiter limits each client's requests on every route. To keep a
// Redis round trip off most requests, a process leases a few requests at a
// time from the shared budget (redis_rate's AllowAtMost) and spends them
// locally; leases left unspent lapse quickly, which only makes the limit a
// little stricter than written.
type RequestLimiter struct {
	r     *Redis
	rl    *redis_rate.Limiter
	limit redis_rate.Limit
	lease int
	life  time.Duration
	local *localLimits
	m     *metrics

	mu     sync.Mutex
	leases map[string]*lease
}

type lease struct {
	left    int
	expires time.Time
}

func newRequestLimiter(r *Redis, rl *redis_rate.Limiter, lim Rate, m *metrics) *RequestLimiter {
	if lim.Off() {
		return nil
	}
	return &RequestLimiter{
		r: r, rl: rl, m: m,
		limit:  redis_rate.Limit{Rate: lim.N, Period: lim.Window, Burst: lim.N},
		lease:  max(1, lim.N/20),
		life:   min(lim.Window/2, time.Second),
		local:  newLocalLimits(lim),
		leases: make(map[string]*lease),
	}
}

// Allow returns fault.RateLimited (429, Retry-After) when client has made
// too many requests.
func (l *RequestLimiter) Allow(ctx context.Context, client string) error {
	if l == nil {
		return nil
	}
	now := time.Now()
	l.mu.Lock()
	if ls, ok := l.leases[client]; ok && ls.left > 0 && now.Before(ls.expires) {
		ls.left--
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()

	key := l.r.key("req:", client)
	if l.r.Usable() {
		res, err := l.rl.AllowAtMost(ctx, key, l.limit, l.lease)
		if err == nil {
			l.r.OK()
			if res.Allowed < 1 {
				return l.refuse(res.RetryAfter)
			}
			if res.Allowed > 1 {
				l.store(client, &lease{left: res.Allowed - 1, expires: now.Add(l.life)}, now)
			}
			return nil
		}
		l.r.Fail("request_limit", err)
	}
	l.m.fallback.WithLabelValues("request_limit").Inc()
	lim := l.local.get(key)
	if r := lim.ReserveN(now, 1); r.OK() {
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return l.refuse(d)
		}
		return nil
	}
	return l.refuse(time.Second)
}

func (l *RequestLimiter) store(client string, ls *lease, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.leases) >= maxLocalKeys {
		for k, v := range l.leases {
			if v.left == 0 || !now.Before(v.expires) {
				delete(l.leases, k)
			}
		}
		if len(l.leases) >= maxLocalKeys {
			clear(l.leases)
		}
	}
	l.leases[client] = ls
}

func (l *RequestLimiter) refuse(wait time.Duration) error {
	return rateLimited(l.m, "request_limit", wait, "over the limit of %d requests per %s (a burst of %d at once, then at that rate); slow down", l.limit.Rate, l.limit.Period, l.limit.Burst)
}

// rateLimited counts a request turned away by limit and returns its 429,
// with Retry-After wait (at least a second).
func rateLimited(m *metrics, limit string, wait time.Duration, format string, args ...any) error {
	m.turnedAway.WithLabelValues(limit).Inc()
	e := fault.New(fault.RateLimited, format, args...)
	e.RetryAfter = max(wait, time.Second)
	return e
}

// localLimits are per-process token buckets by key, the fallback while
// Redis is unreachable. Bounded: when full, buckets that are full again
// (identical to new ones) go first, then all of them (erring on the lenient
// side, which the database's rules make safe).
type localLimits struct {
	every rate.Limit
	burst int

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func newLocalLimits(lim Rate) *localLimits {
	return &localLimits{every: rate.Every(lim.Window / time.Duration(lim.N)), burst: lim.N, m: make(map[string]*rate.Limiter)}
}

func (l *localLimits) get(key string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lim, ok := l.m[key]; ok {
		return lim
	}
	if len(l.m) >= maxLocalKeys {
		now := time.Now()
		for k, v := range l.m {
			if v.TokensAt(now) >= float64(l.burst) {
				delete(l.m, k)
			}
		}
		if len(l.m) >= maxLocalKeys {
			clear(l.m)
		}
	}
	lim := rate.NewLimiter(l.every, l.burst)
	l.m[key] = lim
	return lim
}
