// Package codel tells when a queue stands: when every wait it is told of
// has exceeded a target, for a whole interval. The idea is CoDel's
// (controlled delay, from network routers): a queue that drains between
// bursts is good, it absorbs them; a queue that never drains only adds its
// wait to every answer. While a queue stands, a newcomer's wait is cut to
// twice the target, so that the requests it cannot serve are answered 503
// after that short wait instead of the full one, and those it serves are
// served soon; a burst shorter than the interval (a race for one seat) is
// still waited out in full.
package codel

import "time"

// Queue watches the waits of one queue. A nil *Queue never stands. It is
// not safe for concurrent use: its queue's lock guards it.
type Queue struct {
	target, interval time.Duration
	// onChange, if set, is called with true when the queue begins to stand
	// and false when it stops (for a gauge).
	onChange func(standing bool)

	standing bool
	since    time.Time // when the waits began to exceed target; zero if the last did not
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
	switch {
	case q == nil:
	case d <= q.target:
		q.since = time.Time{}
		q.set(false)
	case q.since.IsZero():
		q.since = time.Now()
	case time.Since(q.since) >= q.interval:
		q.set(true)
	}
}

func (q *Queue) set(standing bool) {
	if q.standing != standing {
		q.standing = standing
		if q.onChange != nil {
			q.onChange(standing)
		}
	}
}

// Wait is how long a newcomer may wait, at most full: twice the target
// while the queue stands.
func (q *Queue) Wait(full time.Duration) time.Duration {
	if !q.Standing() {
		return full
	}
	return min(full, 2*q.target)
}

// Standing reports whether the queue stands.
func (q *Queue) Standing() bool { return q != nil && q.standing }
