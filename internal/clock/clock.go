// Package clock is the one source of time in berth. Everything that decides
// by time (hold expiry, refund cut-offs, webhook windows) takes a Clock, and
// passes its reading to SQL as a parameter, so tests can move time.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// System is the real clock.
type System struct{}

// Now returns the current time in UTC, truncated to microseconds, the
// precision PostgreSQL stores.
func (System) Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// Fake is a clock that only moves when told to. Safe for concurrent use.
type Fake struct {
	mu sync.Mutex
	t  time.Time
}

// NewFake returns a fake clock reading t.
func NewFake(t time.Time) *Fake { return &Fake{t: t.UTC().Truncate(time.Microsecond)} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

// Set moves the clock to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = t.UTC().Truncate(time.Microsecond)
}

// Advance moves the clock forward by d and returns the new time.
func (f *Fake) Advance(d time.Duration) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = f.t.Add(d)
	return f.t
}
