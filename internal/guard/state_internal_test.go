package guard

import (
	"errors"
	"log/slog"
	"sync"
	"testing"
)

// The state Redis's breaker reports (the berth_guard_redis_up gauge) is
// the state it is in once failures and recoveries racing each other are
// over: the older of two reports never has the last word.
func TestRedisStateReportedIsTheLast(t *testing.T) {
	for round := range 200 {
		var (
			mu       sync.Mutex
			reported bool
		)
		r := &Redis{log: slog.New(slog.DiscardHandler), onError: func(string) {}}
		r.onState = func(up bool) {
			mu.Lock()
			reported = up
			mu.Unlock()
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 4 {
			wg.Go(func() {
				<-start
				for range 50 {
					if i%2 == 0 {
						r.Fail("ping", errors.New("connection refused"))
					} else {
						r.OK()
					}
				}
			})
		}
		close(start)
		wg.Wait()
		mu.Lock()
		got := reported
		mu.Unlock()
		if up := !r.down.Load(); got != up {
			t.Fatalf("round %d: reported up=%v, but the breaker says up=%v", round, got, up)
		}
	}
}
