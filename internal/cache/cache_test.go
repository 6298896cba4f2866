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
