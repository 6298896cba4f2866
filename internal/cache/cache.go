// Package cache is a small in-process read cache with single flight, for
// answers that may be a little stale (searches, seat maps, city lists). It
// never decides what is sold; PostgreSQL does.
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
	ttl   time.Duration
	max   int
	group singleflight.Group

	mu      sync.Mutex
	entries map[string]entry[V]
}

type entry[V any] struct {
	v       V
	expires time.Time
}

// New returns a cache whose entries live ttl and which holds at most
// max keys (when full, expired entries go first, then arbitrary ones until
// it is half full).
func New[V any](ttl time.Duration, max int) *Cache[V] {
	return &Cache[V]{ttl: ttl, max: max, entries: make(map[string]entry[V])}
}

// Get returns the cached value of key, or calls load once for all
// concurrent callers and caches what it returns. Errors are not cached.
// The load runs detached from any single caller's cancellation, so one
// impatient caller does not fail the others.
func (c *Cache[V]) Get(ctx context.Context, key string, load func(ctx context.Context) (V, error)) (V, error) {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.v, nil
	}
	ch := c.group.DoChan(key, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		v, err := load(lctx)
		if err != nil {
			return v, err
		}
		c.put(key, v)
		return v, nil
	})
	select {
	case r := <-ch:
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

func (c *Cache[V]) put(key string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		now := time.Now()
		for k, e := range c.entries {
			if now.After(e.expires) || len(c.entries) >= c.max/2 {
				delete(c.entries, k)
			}
		}
	}
	c.entries[key] = entry[V]{v: v, expires: time.Now().Add(c.ttl)}
}

// Forget drops key, so the next Get loads it again.
func (c *Cache[V]) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}
