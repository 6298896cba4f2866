// Package cache is a small in-process read cache with single flight, for
// answers that may be a little stale (searches, seat maps, city lists,
// calendars). It never decides what is sold; PostgreSQL does.
package cache

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Cache keeps values for a short time and refills each key with one call
// however many callers ask at once (single flight), so a thousand identical
// reads cost one query.
type Cache[V any] struct {
	ttl     time.Duration
	max     int
	refresh func(took time.Duration) time.Duration // nil: no early reload
	group   singleflight.Group

	mu      sync.Mutex
	entries map[string]entry[V]
}

type entry[V any] struct {
	v    V
	at   time.Time     // when the load that read v began
	took time.Duration // how long that load took
}

// New returns a cache whose entries live ttl from the start of the load
// that read them, and which holds at most max keys (when full, expired
// entries go first, then arbitrary ones until it is half full).
func New[V any](ttl time.Duration, max int) *Cache[V] {
	return &Cache[V]{ttl: ttl, max: max, entries: make(map[string]entry[V])}
}

// NewRefreshing returns a cache like New's that also reloads an entry
// before it expires: a Get that finds it older than refresh(what its load
// took) starts one reload in the background and is answered with the value
// kept meanwhile. While a key is asked for, its value is then about that
// old, and only the first caller (or one after ttl without a successful
// load) waits for a load.
func NewRefreshing[V any](ttl time.Duration, max int, refresh func(took time.Duration) time.Duration) *Cache[V] {
	c := New[V](ttl, max)
	c.refresh = refresh
	return c
}

// Get returns the cached value of key, or calls load once for all
// concurrent callers and caches what it returns. Errors are not cached.
// The load runs detached from any single caller's cancellation, bounded on
// its own, so one impatient caller does not fail the others.
func (c *Cache[V]) Get(ctx context.Context, key string, load func(ctx context.Context) (V, error)) (V, error) {
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok {
		if age := time.Since(e.at); age < c.ttl {
			if c.refresh != nil && age >= c.refresh(e.took) {
				c.load(ctx, key, load) // in the background: nobody awaits it
			}
			return e.v, nil
		}
	}
	select {
	case r := <-c.load(ctx, key, load):
		if r.Err != nil {
			var zero V
			return zero, r.Err
		}
		return r.Val.(V), nil
	case <-ctx.Done():
		var zero V
		return zero, fmt.Errorf("cache %s: %w", key, ctx.Err())
	}
}

// load runs load for key once for all callers asking at once and keeps
// what it returns. The channel gets the result; nobody has to read it.
func (c *Cache[V]) load(ctx context.Context, key string, load func(ctx context.Context) (V, error)) <-chan singleflight.Result {
	return c.group.DoChan(key, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		began := time.Now()
		v, err := load(lctx)
		if err != nil {
			return v, err
		}
		c.put(key, entry[V]{v: v, at: began, took: time.Since(began)})
		return v, nil
	})
}

func (c *Cache[V]) put(key string, e entry[V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; !ok && len(c.entries) >= c.max {
		for k, o := range c.entries {
			if time.Since(o.at) >= c.ttl || len(c.entries) > c.max/2 {
				delete(c.entries, k)
			}
		}
	}
	c.entries[key] = e
}

// Forget drops key, so the next Get loads it again.
func (c *Cache[V]) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}
