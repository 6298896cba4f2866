package httpapi

import (
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// fresh is a value worked out at most once per period, one working-out at
// a time: callers that come meanwhile share its result, and a result
// serves for the period after it was worked out. For what anyone may ask
// for without limit (probes, scrapes), so that a flood costs one
// working-out per period, not one each. The zero fresh is ready to use.
type fresh[T any] struct {
	last   atomic.Pointer[stamped[T]]
	flight singleflight.Group
}

type stamped[T any] struct {
	at time.Time
	v  T
}

// get returns the last result if it is younger than period, else works
// one out with compute (or waits for the one under way).
func (f *fresh[T]) get(period time.Duration, compute func() T) T {
	if cur := f.last.Load(); cur != nil && time.Since(cur.at) < period {
		return cur.v
	}
	v, _, _ := f.flight.Do("", func() (any, error) {
		v := compute()
		f.last.Store(&stamped[T]{at: time.Now(), v: v})
		return v, nil
	})
	return v.(T)
}
