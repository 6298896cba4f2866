package guard

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
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

// HoldLimiter limits how many holds a customer may make per window
// (BERTH_HOLD_LIMIT, 3 per 15 minutes by default).
//
// It counts successful holds, not attempts: in a flash sale most attempts
// lose (seat taken, sold out), and counting them would lock out exactly the
// customers who keep trying. Take reserves one hold of the window before the
// hold is asked, in one Redis script (GCRA), so that concurrent holds of one
// customer can never together pass the limit; a hold that was refused (or
// never asked) gives its reservation back with Give. While holds of a
// customer are in flight, their reservations count: a customer at the limit
// minus one with two holds in flight has the second refused, even if the
// first then fails. Every hold still obeys the database's rules.
type HoldLimiter struct {
	r     *Redis
	rl    *redis_rate.Limiter
	limit redis_rate.Limit
	local *localLimits
	m     *metrics
}

// holdTicket is one hold reserved by Take, to be given back by Give when
// the hold did not happen.
type holdTicket struct {
	key   string            // the shared limiter's key; "" when reserved in process
	local *rate.Reservation // the per-process reservation
}

func newHoldLimiter(r *Redis, rl *redis_rate.Limiter, lim Rate, m *metrics) *HoldLimiter {
	if lim.Off() {
		return nil
	}
	return &HoldLimiter{
		r: r, rl: rl, m: m,
		limit: redis_rate.Limit{Rate: lim.N, Period: lim.Window, Burst: lim.N},
		local: newLocalLimits(lim),
	}
}

// holdRefund gives one emission interval (ARGV[1], seconds) back to a GCRA
// key of go-redis/redis_rate (its theoretical arrival time, seconds since
// 2017-01-01 on Redis's clock): the reservation that Take made is undone as
// if it had never been made, and a key that is full again is deleted.
var holdRefund = redis.NewScript(`
redis.replicate_commands()
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat then return 0 end
local t = redis.call('TIME')
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local new_tat = tat - tonumber(ARGV[1])
if new_tat <= now then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], new_tat, 'EX', math.ceil(new_tat - now))
end
return 1
`)

// Take reserves one hold of customer's window, or returns
// fault.RateLimited (429, Retry-After) when the window is used up. The
// ticket (nil when the limit is off) goes back to Give if the hold fails.
func (h *HoldLimiter) Take(ctx context.Context, customer int64) (*holdTicket, error) {
	if h == nil {
		return nil, nil
	}
	key := h.key(customer)
	if h.r.Usable() {
		res, err := h.rl.AllowN(ctx, key, h.limit, 1)
		if err == nil {
			h.r.OK()
			if res.Allowed < 1 {
				return nil, h.refuse(res.RetryAfter)
			}
			return &holdTicket{key: key}, nil
		}
		h.r.Fail("hold_limit", err)
	}
	h.m.fallback.WithLabelValues("hold_limit").Inc()
	now := time.Now()
	r := h.local.get(key).ReserveN(now, 1)
	if !r.OK() {
		return nil, h.refuse(h.interval())
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return nil, h.refuse(d)
	}
	return &holdTicket{local: r}, nil
}

// Give returns the hold t reserved: the hold was refused or never asked.
func (h *HoldLimiter) Give(ctx context.Context, t *holdTicket) {
	if h == nil || t == nil {
		return
	}
	if t.local != nil {
		t.local.Cancel()
		return
	}
	err := holdRefund.Run(ctx, h.r.Cmd, []string{redisRatePrefix + t.key}, h.interval().Seconds()).Err()
	if err != nil {
		// The customer keeps one hold fewer until the window moves on:
		// the safe side.
		h.r.Fail("hold_limit", err)
		return
	}
	h.r.OK()
}

// redisRatePrefix is what go-redis/redis_rate puts before its keys.
const redisRatePrefix = "rate:"

func (h *HoldLimiter) key(customer int64) string {
	return h.r.key("hold:", strconv.FormatInt(customer, 10))
}

func (h *HoldLimiter) interval() time.Duration {
	return h.limit.Period / time.Duration(h.limit.Rate)
}

func (h *HoldLimiter) refuse(wait time.Duration) error {
	return rateLimited(h.m, "hold_limit", wait, "at most %d holds per %s; try again later", h.limit.Rate, h.limit.Period)
}

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
	return rateLimited(l.m, "request_limit", wait, "more than %d requests per %s; slow down", l.limit.Rate, l.limit.Period)
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
