package codel_test

import (
	"testing"
	"time"

	"berth.dev/berth/internal/codel"
)

// A queue stands only once its waits have exceeded the target for a
// whole interval; it stops at the first wait within the target. While it
// stands a newcomer waits twice the target at most.
func TestQueueStandsAfterAnIntervalOfLongWaits(t *testing.T) {
	t.Parallel()
	const target, full = time.Millisecond, time.Second
	var changes []bool
	q := codel.New(target, 50*time.Millisecond, func(on bool) { changes = append(changes, on) })

	q.Waited(0)
	q.Waited(5 * time.Millisecond) // the long waits begin
	if q.Standing() || q.Wait(full) != full {
		t.Fatalf("after one long wait: standing %v, wait %v, want the full wait", q.Standing(), q.Wait(full))
	}
	time.Sleep(60 * time.Millisecond)
	q.Waited(5 * time.Millisecond)
	if !q.Standing() || q.Wait(full) != 2*target {
		t.Fatalf("after an interval of long waits: standing %v, wait %v, want %v", q.Standing(), q.Wait(full), 2*target)
	}
	if got := q.Wait(time.Microsecond); got != time.Microsecond {
		t.Errorf("a shorter full wait became %v", got)
	}
	q.Waited(target)
	if q.Standing() || q.Wait(full) != full {
		t.Errorf("after a wait within the target: standing %v, wait %v", q.Standing(), q.Wait(full))
	}
	// A wait within the target also restarts the interval.
	q.Waited(5 * time.Millisecond)
	if q.Standing() {
		t.Error("standing again at the first long wait after a short one")
	}
	if len(changes) != 2 || !changes[0] || changes[1] {
		t.Errorf("changes %v, want [true false]", changes)
	}
}

// Long waits that come within one interval are a burst, not a standing
// queue; and a nil Queue (no target) never stands.
func TestBurstDoesNotStand(t *testing.T) {
	t.Parallel()
	q := codel.New(time.Millisecond, time.Hour, nil)
	for range 1000 {
		q.Waited(time.Second)
	}
	if q.Standing() || q.Wait(time.Second) != time.Second {
		t.Errorf("a burst made the queue stand: wait %v", q.Wait(time.Second))
	}
	var none *codel.Queue
	if codel.New(0, time.Second, nil) != none || codel.New(time.Second, 0, nil) != none {
		t.Error("a queue without a target or an interval is not nil")
	}
	none.Waited(time.Hour)
	if none.Standing() || none.Wait(time.Second) != time.Second {
		t.Error("a nil queue stands")
	}
}
