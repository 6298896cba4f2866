// Package codel tells when a queue stands: when even its luckiest waiters
// keep waiting longer than a target, for a whole interval. The idea is
// CoDel's (controlled delay, from network routers): a queue that drains
// between bursts is good, it absorbs them; a queue that never drains only
// adds its wait to every answer. While a queue stands, a newcomer's wait
// is cut to twice the target, so that the requests it cannot serve are
// answered 503 after that short wait instead of the full one, and those it
// serves are served soon; a burst shorter than the interval (a race for
// one seat) is still waited out in full.
package codel

import (
	"sync"
	"sync/atomic"
	"time"
)

// Queue watches the waits of one queue. A nil *Queue never stands.
type Queue struct {
	target, interval time.Duration
	// onChange, if set, is called with true when the queue begins to stand
	// and false when it stops (for a gauge).
	onChange func(standing bool)

	standing atomic.Bool
	mu       sync.Mutex
	// since is when the waits began to exceed target (Unix nanoseconds;
	// 0 if the last did not). Written under mu.
	since atomic.Int64
}

// New returns a Queue that stands once every wait has exceeded target for
// interval; nil (never standing) if either is not positive. onChange may
// be nil.
func New(target, interval time.Duration, onChange func(standing bool)) *Queue {
	if target <= 0 || interval <= 0 {
		return nil
	}
	return &Queue{target: target, interval: interval, onChange: onChange}
}

// Waited records that a waiter got its turn after waiting d (0 for one
// served at once).
func (q *Queue) Waited(d time.Duration) {
	if q == nil {
		return
	}
	if d <= q.target {
		if q.since.Load() == 0 && !q.standing.Load() {
			return // the common case, in a queue that drains: no lock
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		q.since.Store(0)
		q.set(false)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now().UnixNano()
	switch since := q.since.Load(); {
	case since == 0:
		q.since.Store(now)
	case time.Duration(now-since) >= q.interval:
		q.set(true)
	}
}

func (q *Queue) set(standing bool) {
	if q.standing.Swap(standing) != standing && q.onChange != nil {
		q.onChange(standing)
	}
}

// Wait is how long a newcomer may wait, at most full: twice the target
// while the queue stands.
func (q *Queue) Wait(full time.Duration) time.Duration {
	if q == nil || !q.standing.Load() {
		return full
	}
	return min(full, 2*q.target)
}

// Standing reports whether the queue stands.
func (q *Queue) Standing() bool { return q != nil && q.standing.Load() }
