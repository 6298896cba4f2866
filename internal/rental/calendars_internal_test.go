package rental

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeLoads counts loads of each city and answers each with a calendar of
// as many cars as loads so far, so a caller can tell which load it got.
type fakeLoads struct {
	n    atomic.Int64
	fail atomic.Bool
	gate chan struct{} // when set, each load waits for it
}

func (f *fakeLoads) load(ctx context.Context, city string) (*cityCalendar, error) {
	if f.gate != nil {
		<-f.gate
	}
	if f.fail.Load() {
		return nil, errors.New("the database is away")
	}
	n := f.n.Add(1)
	return &cityCalendar{cars: make([]*Car, n), busy: make([][]span, n)}, nil
}

// version is which load cc came from.
func version(t *testing.T, cs *calendars, city string) int {
	t.Helper()
	cc, err := cs.get(context.Background(), city)
	if err != nil {
		t.Fatalf("get %s: %v", city, err)
	}
	return len(cc.cars)
}

// A hundred searches of a city at once cost one load; a calendar older than
// fresh is still answered from while one reload runs in the background.
func TestCalendarsLoadOnceAndReloadInTheBackground(t *testing.T) {
	f := &fakeLoads{gate: make(chan struct{})}
	cs := newCalendars(50*time.Millisecond, time.Hour, 10, f.load)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 100 {
		wg.Go(func() {
			<-start
			if _, err := cs.get(context.Background(), "HN"); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	time.Sleep(20 * time.Millisecond)
	close(f.gate)
	wg.Wait()
	if n := f.n.Load(); n != 1 {
		t.Fatalf("%d loads for 100 searches at once, want 1", n)
	}
	f.gate = nil
	if v := version(t, cs, "HN"); v != 1 {
		t.Fatalf("fresh calendar: load %d, want 1", v)
	}
	time.Sleep(60 * time.Millisecond)
	// Older than fresh: this search gets the old one (1) or, if the
	// background reload already finished, the new one; the ones after
	// get the new one once it is in.
	if v := version(t, cs, "HN"); v > 2 {
		t.Fatalf("after fresh: load %d", v)
	}
	deadline := time.Now().Add(5 * time.Second)
	for version(t, cs, "HN") != 2 {
		if time.Now().After(deadline) {
			t.Fatal("no reload in the background within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A calendar older than stale is not used: the search waits for a load, and
// fails when the load does. Younger, a failed reload leaves searches
// answered from the calendar there is.
func TestCalendarsNeverServeOlderThanStale(t *testing.T) {
	f := &fakeLoads{}
	cs := newCalendars(10*time.Millisecond, 100*time.Millisecond, 10, f.load)
	version(t, cs, "DN")
	f.fail.Store(true)
	time.Sleep(20 * time.Millisecond)
	if v := version(t, cs, "DN"); v != 1 { // the reload fails in the background
		t.Fatalf("younger than stale with the database away: load %d, want 1", v)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := cs.get(context.Background(), "DN"); err == nil {
		t.Fatal("a calendar older than stale was served with the database away")
	}
	f.fail.Store(false)
	if v := version(t, cs, "DN"); v != 2 {
		t.Fatalf("older than stale: load %d, want a new one (2)", v)
	}
}

// Searches for made-up cities cannot grow the calendars kept past max.
func TestCalendarsKeepAtMostMaxCities(t *testing.T) {
	f := &fakeLoads{}
	cs := newCalendars(time.Second, time.Minute, 8, f.load)
	for i := range 100 {
		version(t, cs, fmt.Sprintf("X%02d", i))
	}
	cs.mu.Lock()
	n := len(cs.city)
	cs.mu.Unlock()
	if n > 8 {
		t.Errorf("%d cities kept, want at most 8", n)
	}
}

// A slow load is repeated less often: twenty times what it took, up to half
// the stale bound.
func TestReloadAfterGrowsWithTheLoad(t *testing.T) {
	cs := newCalendars(time.Second, 30*time.Second, 10, nil)
	for _, tc := range []struct{ took, want time.Duration }{
		{10 * time.Millisecond, time.Second},
		{200 * time.Millisecond, 4 * time.Second},
		{5 * time.Second, 15 * time.Second},
	} {
		if got := cs.reloadAfter(&loaded{took: tc.took}); got != tc.want {
			t.Errorf("load took %s: reload after %s, want %s", tc.took, got, tc.want)
		}
	}
}
