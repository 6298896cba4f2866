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
// little stricter than written. A process asks for one lease of a client
// at a time: requests of that client that come meanwhile wait for it and
// spend it, instead of each taking a lease of its own (twenty at once
// would take the whole burst, most of it never spent).
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

// lease is what a process holds of a client's budget: left requests until
// expires; or, when refused, no request until expires; or, while fetching
// is open, a lease being asked for.
type lease struct {
	left     int
	expires  time.Time
	refused  bool
	fetching chan struct{} // closed when the lease asked for is stored
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
	for {
		now := time.Now()
		l.mu.Lock()
		ls, ok := l.leases[client]
		switch {
		case ok && ls.fetching != nil:
			wait := ls.fetching
			l.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		case ok && now.Before(ls.expires) && ls.refused:
			l.mu.Unlock()
			return l.refuse(ls.expires.Sub(now))
		case ok && now.Before(ls.expires) && ls.left > 0:
			ls.left--
			l.mu.Unlock()
			return nil
		}
		if !l.r.Usable() {
			l.mu.Unlock()
			return l.allowLocally(client, now)
		}
		mine := &lease{fetching: make(chan struct{})}
		l.put(client, mine, now)
		l.mu.Unlock()
		return l.fetch(ctx, client, mine, now)
	}
}

// fetch asks Redis for a lease of client's requests, spends one of it and
// stores the rest for the requests waiting on mine.
func (l *RequestLimiter) fetch(ctx context.Context, client string, mine *lease, now time.Time) error {
	res, err := l.rl.AllowAtMost(ctx, l.r.key("req:", client), l.limit, l.lease)
	l.mu.Lock()
	defer func() {
		close(mine.fetching)
		mine.fetching = nil
		l.mu.Unlock()
	}()
	if err != nil {
		// Those waiting ask again, or locally if the breaker opened.
		if l.leases[client] == mine {
			delete(l.leases, client)
		}
		l.r.Fail("request_limit", err)
		return l.allowLocally(client, now)
	}
	l.r.OK()
	if res.Allowed < 1 {
		mine.refused, mine.expires = true, now.Add(min(res.RetryAfter, l.life))
		return l.refuse(res.RetryAfter)
	}
	mine.left, mine.expires = res.Allowed-1, now.Add(l.life)
	return nil
}

// allowLocally is the per-process limit, while Redis is unreachable.
func (l *RequestLimiter) allowLocally(client string, now time.Time) error {
	l.m.fallback.WithLabelValues("request_limit").Inc()
	lim := l.local.get(l.r.key("req:", client))
	if r := lim.ReserveN(now, 1); r.OK() {
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return l.refuse(d)
		}
		return nil
	}
	return l.refuse(time.Second)
}

// put stores client's lease; l.mu is held. Bounded: when full, leases
// spent or lapsed go first, then all but those being fetched.
func (l *RequestLimiter) put(client string, ls *lease, now time.Time) {
	if len(l.leases) >= maxLocalKeys {
		for k, v := range l.leases {
			if v.fetching == nil && (v.left == 0 || !now.Before(v.expires)) {
				delete(l.leases, k)
			}
		}
		if len(l.leases) >= maxLocalKeys {
			for k, v := range l.leases {
				if v.fetching == nil {
					delete(l.leases, k)
				}
			}
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
