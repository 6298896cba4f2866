package httpapi

import (
	"sync"
	"time"
)

// lineLimit lets a kind of log line be written at most once a period, and
// says in each line written how many like it were left out since the one
// before. Refusals of load are answered by the thousand a second in an
// overload, which the shed metrics count one by one; a line for each would
// flood the log, and cost CPU exactly when there is none to spare.
type lineLimit struct {
	every time.Duration
	mu    sync.Mutex
	kinds map[lineKey]*lineKind // a few: one per message and route
}

// lineKey is a kind of line: its message and the route it was written for
// (a struct, so that telling kinds apart allocates nothing).
type lineKey struct{ msg, route string }

type lineKind struct {
	next time.Time // the earliest a line of this kind may be written again
	left int       // lines left out since the last one written
}

func newLineLimit(every time.Duration) *lineLimit {
	return &lineLimit{every: every, kinds: make(map[lineKey]*lineKind)}
}

// allow reports whether a line of kind may be written at now, and, when it
// may, how many were left out before it.
func (l *lineLimit) allow(kind lineKey, now time.Time) (ok bool, left int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.kinds[kind]
	if k == nil {
		k = &lineKind{}
		l.kinds[kind] = k
	}
	if now.Before(k.next) {
		k.left++
		return false, 0
	}
	left, k.left, k.next = k.left, 0, now.Add(l.every)
	return true, left
}
