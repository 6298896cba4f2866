package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Redis is the shared store of the layers: a go-redis client with short
// timeouts and a breaker. Every layer asks Usable first and reports its
// failures with Fail; after a failure the breaker keeps Redis out of the
// request path for a moment, so an unreachable Redis costs one quick error
// now and then instead of a timeout on every request. The layers then step
// aside (gate, hints) or fall back to per-process state (limits): the
// database decides what is sold either way.
type Redis struct {
	// Client is the connection pool; keys the layers write start with
	// Prefix. Cmd is what the layers send their commands through: the
	// client, or its auto-pipeliner.
	Client *redis.Client
	Cmd    redis.Cmdable
	Prefix string

	embedded  *miniredis.Miniredis
	log       *slog.Logger
	downUntil atomic.Int64 // unix nanoseconds; Redis is skipped before it
	down      atomic.Bool  // last known state, for logging transitions once
	onError   func(op string)
	onState   func(up bool)
	stateMu   sync.Mutex // serialises onState, so that the last call says the state
}

// RedisOptions tune OpenRedis.
type RedisOptions struct {
	// Prefix starts every key, so that several deployments (or tests)
	// can share one Redis.
	Prefix string
	// Timeout bounds each command's network wait (default 200ms): a slow
	// Redis must not make a fast path slow.
	Timeout time.Duration
	// PoolSize is the number of connections (default 128).
	PoolSize int
	// MinIdle connections (default 16, at most PoolSize) are open before
	// OpenRedis returns, and kept open: a sale's first second does not
	// wait for connections to be made.
	MinIdle int
	// AutoPipeline sends the commands of concurrent requests together, in
	// one round trip (go-redis's auto-pipelining, marked experimental in
	// v9.23 and pinned), once pipelineFrom are in flight; fewer go
	// straight (see quietOrBusy). On a 2-core machine it doubled the
	// requests a second that the waiting room and the gate answer through
	// Redis.
	AutoPipeline bool
}

// breakerPause is how long Redis is left alone after a failure before the
// next request tries it again.
const breakerPause = time.Second

// OpenRedis connects to url. Without a url it starts an embedded
// single-instance substitute in this process (miniredis, which speaks the
// same protocol, so one code path serves both) and logs a warning: the
// waiting room and limits are then per process, not shared. An unreachable
// Redis is not an error here: berth starts, /readyz reports it, and the
// layers step aside until it answers.
func OpenRedis(ctx context.Context, url string, o RedisOptions, log *slog.Logger) (*Redis, error) {
	if o.Timeout == 0 {
		o.Timeout = 200 * time.Millisecond
	}
	if o.PoolSize == 0 {
		o.PoolSize = 128
	}
	if o.MinIdle == 0 {
		o.MinIdle = 16
	}
	o.MinIdle = min(o.MinIdle, o.PoolSize)
	r := &Redis{Prefix: o.Prefix, log: log, onError: func(string) {}, onState: func(bool) {}}
	var opt *redis.Options
	if url == "" {
		m := miniredis.NewMiniRedis()
		// Keys expire with the wall clock, as in a real Redis (miniredis
		// otherwise only expires keys when a test tells it to).
		m.ClockTTL(true)
		r.embedded = m
		opt = &redis.Options{Dialer: func(context.Context, string, string) (net.Conn, error) { return m.Dial() }}
		// In process nothing can be unreachable, only slow: miniredis runs
		// each Lua script in a fresh interpreter (about 1.5 ms, one at a
		// time), so a burst queues. Waiting is better than stepping aside.
		o.Timeout = max(o.Timeout, 5*time.Second)
		log.Warn("BERTH_REDIS_URL is not set: using an embedded single-instance Redis substitute, for development; " +
			"the waiting room, seat gate and limits are then per process, not shared between berth processes, " +
			"and it runs a few hundred scripts a second at most: set BERTH_REDIS_URL for a real sale")
	} else {
		var err error
		if opt, err = redis.ParseURL(url); err != nil {
			return nil, fmt.Errorf("parse redis url: %w", err)
		}
	}
	opt.DialTimeout = 2 * o.Timeout
	opt.ReadTimeout = o.Timeout
	opt.WriteTimeout = o.Timeout
	opt.PoolTimeout = o.Timeout
	opt.ContextTimeoutEnabled = true
	opt.PoolSize = o.PoolSize
	opt.MinIdleConns = o.MinIdle
	// A script that reached Redis may have run: never send it twice.
	opt.MaxRetries = -1
	// One dial per attempt: go-redis otherwise dials 5 times 100 ms apart,
	// so each request the breaker lets through to a Redis that is down
	// would wait 0.4–0.8 s instead of failing at once.
	opt.DialerRetries = 1
	opt.DisableIdentity = true
	r.Client = redis.NewClient(opt)
	r.Cmd = r.Client
	if o.AutoPipeline {
		ap, err := r.Client.AutoPipeline()
		if err != nil {
			_ = r.Close()
			return nil, fmt.Errorf("redis auto-pipelining: %w", err)
		}
		r.Cmd = &quietOrBusy{Client: r.Client, busy: ap}
	}

	pctx, cancel := context.WithTimeout(ctx, 2*opt.DialTimeout)
	defer cancel()
	if err := r.Client.Ping(pctx).Err(); err != nil {
		log.Warn("redis is not reachable; the surge layers step aside until it is", "err", err)
		r.Fail("ping", err)
		return r, nil
	}
	r.warm(pctx, o.MinIdle)
	return r, nil
}

// warm opens n connections now (go-redis opens its minimum in the
// background, after the first requests may already have come): n pings at
// once, each on a connection of its own (held until all are made), then
// hands them to the pool. A connection that cannot be made now is left to
// the pool.
func (r *Redis) warm(ctx context.Context, n int) {
	conns := make([]*redis.Conn, n)
	var wg sync.WaitGroup
	for i := range conns {
		conns[i] = r.Client.Conn()
		wg.Go(func() { _ = conns[i].Ping(ctx).Err() })
	}
	wg.Wait()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Observe sets the functions that count errors and state changes (the
// metrics); call it before serving.
func (r *Redis) Observe(onError func(op string), onState func(up bool)) {
	r.onError, r.onState = onError, onState
	onState(!r.down.Load())
}

// Usable reports whether the layers should ask Redis now (the breaker is
// closed), or step aside.
func (r *Redis) Usable() bool { return time.Now().UnixNano() >= r.downUntil.Load() }

// Fail records that op failed with err and opens the breaker for a moment.
// redis.Nil (no such key) is not a failure.
func (r *Redis) Fail(op string, err error) {
	if err == nil || errors.Is(err, redis.Nil) {
		return
	}
	r.onError(op)
	r.downUntil.Store(time.Now().Add(breakerPause).UnixNano())
	if !r.down.Swap(true) {
		r.log.Warn("redis failed: layers step aside, limits fall back to this process", "op", op, "err", err)
		r.reportState()
	}
}

// reportState tells onState the state as it is now, not as the caller
// found it: a failure and a recovery racing each other (one swapped the
// flag, then the other) must not leave the last word to the older one.
func (r *Redis) reportState() {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	r.onState(!r.down.Load())
}

// OK records that a command succeeded, closing the breaker.
func (r *Redis) OK() {
	if r.down.Load() && r.down.Swap(false) {
		r.log.Info("redis answers again")
		r.reportState()
	}
}

// Ping checks that Redis answers; /readyz calls it.
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.Client.Ping(ctx).Err(); err != nil {
		r.Fail("ping", err)
		return fmt.Errorf("redis: %w", err)
	}
	r.OK()
	r.downUntil.Store(0)
	return nil
}

// Embedded reports whether this is the in-process substitute.
func (r *Redis) Embedded() bool { return r.embedded != nil }

// Close closes the client (and stops the embedded substitute).
func (r *Redis) Close() error {
	err := r.Client.Close()
	if r.embedded != nil {
		r.embedded.Close()
	}
	return err
}

// key returns the prefixed key.
func (r *Redis) key(parts ...string) string {
	return r.Prefix + strings.Join(parts, "")
}

// pipelineFrom is how many of the layers' commands may be in flight before
// the next one goes through the auto-pipeliner. Below it a command is sent
// straight on a pooled connection: its own round trip, without the
// hand-offs to and from the pipeliner's goroutines, which a lone command
// pays for and gains nothing from (measured on a 2-core machine, one
// client holding one seat at a time: the seat gate's script answered in
// 0.26–0.32 ms straight against 0.36–0.46 ms pipelined, medians).
const pipelineFrom = 4

// quietOrBusy sends the layers' commands straight while few are in flight
// (a quiet day) and through the auto-pipeliner once a crowd has gathered
// (a sale: many commands in one round trip). The commands the layers send
// on the request path are steered (scripts, SETNX, DEL); any other goes
// straight.
type quietOrBusy struct {
	*redis.Client               // straight
	busy          redis.Cmdable // the auto-pipeliner
	inFlight      atomic.Int32
}

// via returns where to send the next command; done must be called when
// its answer is in (the pipeliner's blocking face returns only then).
func (q *quietOrBusy) via() redis.Cmdable {
	if q.inFlight.Add(1) > pipelineFrom {
		return q.busy
	}
	return q.Client
}

func (q *quietOrBusy) done() { q.inFlight.Add(-1) }

func (q *quietOrBusy) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	defer q.done()
	return q.via().EvalSha(ctx, sha1, keys, args...)
}

func (q *quietOrBusy) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	defer q.done()
	return q.via().Eval(ctx, script, keys, args...)
}

func (q *quietOrBusy) SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd {
	defer q.done()
	return q.via().SetNX(ctx, key, value, expiration)
}

func (q *quietOrBusy) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	defer q.done()
	return q.via().Del(ctx, keys...)
}
