package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A hundred callers asking at once for one key cost one load; the value is
// served from the cache afterwards, errors are not kept, Forget reloads and
// the number of keys stays bounded.
func TestCacheLoadsOncePerKey(t *testing.T) {
	ctx := context.Background()
	c := New[int](time.Minute, 8)
	var loads atomic.Int32
	release := make(chan struct{})
	load := func(context.Context) (int, error) {
		loads.Add(1)
		<-release
		return 42, nil
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 100 {
		wg.Go(func() {
			<-start
			if v, err := c.Get(ctx, "k", load); err != nil || v != 42 {
				t.Errorf("Get = %d, %v", v, err)
			}
		})
	}
	close(start)
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Errorf("%d loads for 100 concurrent callers, want 1", n)
	}
	if _, err := c.Get(ctx, "k", load); err != nil || loads.Load() != 1 {
		t.Errorf("cached value reloaded: %d loads, %v", loads.Load(), err)
	}

	boom := errors.New("boom")
	if _, err := c.Get(ctx, "bad", func(context.Context) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Errorf("error = %v, want boom", err)
	}
	if v, err := c.Get(ctx, "bad", func(context.Context) (int, error) { return 7, nil }); err != nil || v != 7 {
		t.Errorf("an error was cached: %d, %v", v, err)
	}

	c.Forget("k")
	if _, err := c.Get(ctx, "k", load); err != nil || loads.Load() != 2 {
		t.Errorf("after Forget: %d loads, want 2 (%v)", loads.Load(), err)
	}

	for i := range 50 {
		if _, err := c.Get(ctx, fmt.Sprint(i), func(context.Context) (int, error) { return i, nil }); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	n := len(c.entries)
	c.mu.Unlock()
	if n > 8 {
		t.Errorf("%d keys kept, want at most 8", n)
	}
}

// An entry older than its time to live is loaded again.
func TestCacheEntriesExpire(t *testing.T) {
	ctx := context.Background()
	c := New[int](20*time.Millisecond, 4)
	var loads atomic.Int32
	load := func(context.Context) (int, error) { return int(loads.Add(1)), nil }
	if v, _ := c.Get(ctx, "k", load); v != 1 {
		t.Fatalf("first Get = %d", v)
	}
	time.Sleep(40 * time.Millisecond)
	if v, _ := c.Get(ctx, "k", load); v != 2 {
		t.Errorf("after the ttl Get = %d, want a fresh load (2)", v)
	}
}

// A refreshing cache answers from an entry older than its refresh age while
// one reload runs in the background, and the callers after it get the
// reloaded value.
func TestRefreshingReloadsInTheBackground(t *testing.T) {
	ctx := context.Background()
	c := NewRefreshing[int](time.Hour, 4, func(time.Duration) time.Duration { return 30 * time.Millisecond })
	var loads atomic.Int32
	gate := make(chan struct{}, 1)
	load := func(context.Context) (int, error) {
		<-gate
		return int(loads.Add(1)), nil
	}
	gate <- struct{}{}
	if v, _ := c.Get(ctx, "k", load); v != 1 {
		t.Fatalf("first Get = %d", v)
	}
	time.Sleep(40 * time.Millisecond)
	// The reload waits on the gate: every Get meanwhile is answered at
	// once with the value kept, and only one reload is started.
	for range 50 {
		if v, err := c.Get(ctx, "k", load); err != nil || v != 1 {
			t.Fatalf("Get during the reload = %d, %v, want the kept 1", v, err)
		}
	}
	gate <- struct{}{}
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, _ := c.Get(ctx, "k", load)
		if v == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no reload in the background within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := loads.Load(); n != 2 {
		t.Errorf("%d loads, want 2 (one reload for all the Gets)", n)
	}
}

// A refreshing cache never answers with an entry older than its ttl: younger,
// a failed background reload leaves the kept value served; older, the caller
// waits for a load and gets its error.
func TestRefreshingNeverServesOlderThanTheTTL(t *testing.T) {
	ctx := context.Background()
	c := NewRefreshing[int](100*time.Millisecond, 4, func(time.Duration) time.Duration { return 10 * time.Millisecond })
	var loads atomic.Int32
	var fail atomic.Bool
	load := func(context.Context) (int, error) {
		if fail.Load() {
			return 0, errors.New("the database is away")
		}
		return int(loads.Add(1)), nil
	}
	if v, _ := c.Get(ctx, "k", load); v != 1 {
		t.Fatalf("first Get = %d", v)
	}
	fail.Store(true)
	time.Sleep(20 * time.Millisecond)
	if v, err := c.Get(ctx, "k", load); err != nil || v != 1 {
		t.Fatalf("younger than the ttl with the database away: %d, %v, want the kept 1", v, err)
	}
	time.Sleep(100 * time.Millisecond)
	if v, err := c.Get(ctx, "k", load); err == nil {
		t.Fatalf("an entry older than the ttl was served with the database away: %d", v)
	}
	fail.Store(false)
	if v, _ := c.Get(ctx, "k", load); v != 2 {
		t.Fatalf("older than the ttl: %d, want a new load (2)", v)
	}
}
