package guard

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"berth.dev/berth/internal/base"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/pg/pgtest"
)

// batchLog records what the layers send Redis: each command sent alone,
// and each batch of commands sent together (auto-pipelined).
type batchLog struct {
	mu      sync.Mutex
	batches [][]string
}

func (l *batchLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *batchLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (l *batchLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.add(cmds)
		return next(ctx, cmds)
	}
}

func (l *batchLog) add(cmds []redis.Cmder) {
	var names []string
	for _, c := range cmds {
		names = append(names, c.Name())
	}
	l.mu.Lock()
	l.batches = append(l.batches, names)
	l.mu.Unlock()
}

func (l *batchLog) take() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.batches
	l.batches = nil
	return b
}

// A hold nobody competes with (a flight without a waiting room, a free
// seat, a process with few holds in flight) sends Redis nothing: the seat
// gate is for crowds, and the hold limit is the database's. Once the
// process has more than QuietHolds holds in flight, the next one passes
// the seat gate: one script (each GET, SET and TIME that Redis counts runs
// inside it), by its hash, so a script Warm left out of Redis's cache
// shows here too (the hold would be told NOSCRIPT and send it again: a
// second round trip in sequence). A command added to either path shows.
func TestLoneHoldSendsNothingACrowdOneScript(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	rdb := openTestRedis(t, RedisOptions{AutoPipeline: true, MinIdle: 1})
	g := New(base.Archetype{Log: log, Clock: clock.System{}, Registry: prometheus.NewRegistry()},
		Config{On: true, Lanes: LanesFor(4), ShedWait: 150 * time.Millisecond}, rdb, pgtest.NewPool(t))
	// Redis as berth may find it, its script cache empty (a restart, or
	// no berth before this one; the layers' scripts all fall back to
	// sending themselves, so flushing harms no other test), then started
	// as app.New starts it.
	if err := rdb.Client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := g.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	// Warming the limits wrote nothing.
	if n, err := rdb.Client.Exists(ctx, "rate:"+rdb.Prefix+"warm").Result(); err != nil || n != 0 {
		t.Errorf("warming the limits left a key (%d, %v)", n, err)
	}
	l := &batchLog{}
	rdb.Client.AddHook(l)
	sent := func() []string {
		var sent []string
		for _, b := range l.take() {
			for _, c := range b {
				if c != "hello" && c != "ping" && c != "client" { // a connection being made
					sent = append(sent, c)
				}
			}
		}
		return sent
	}
	seat := func(i int) Intent {
		return Intent{Customer: int64(i), FlightID: 1, FareClass: "ECONOMY", Seats: []string{fmt.Sprintf("%dA", i+1)}, Units: 1}
	}
	for i := range 20 {
		if err := g.Hold(ctx, seat(i), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
		if s := sent(); len(s) != 0 {
			t.Errorf("lone hold %d sent %v to Redis, want nothing", i, s)
		}
	}
	// Four holds in flight (the default QuietHolds), each in its database
	// call until release closes.
	release := make(chan struct{})
	var wg sync.WaitGroup
	var inCall sync.WaitGroup
	for i := range 4 {
		inCall.Add(1)
		wg.Go(func() {
			_ = g.Hold(ctx, seat(100+i), func(context.Context) error { inCall.Done(); <-release; return nil })
		})
	}
	inCall.Wait()
	if s := sent(); len(s) != 0 {
		t.Errorf("the first four holds sent %v to Redis, want nothing", s)
	}
	if err := g.Hold(ctx, seat(200), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("fifth hold: %v", err)
	}
	if s := sent(); len(s) != 1 || s[0] != "evalsha" {
		t.Errorf("the fifth hold in flight sent %v to Redis, want one script (the seat gate)", s)
	}
	close(release)
	wg.Wait()
	if err := g.Hold(ctx, seat(300), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("hold after the crowd: %v", err)
	}
	if s := sent(); len(s) != 0 {
		t.Errorf("a lone hold after the crowd sent %v to Redis, want nothing", s)
	}
}

// openTestRedis opens the test Redis (BERTH_TEST_REDIS_URL, else the local
// one) with o and a key prefix of its own, and deletes every key under that
// prefix when tb ends.
func openTestRedis(tb testing.TB, o RedisOptions) *Redis {
	tb.Helper()
	url := os.Getenv("BERTH_TEST_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	o.Prefix = fmt.Sprintf("berthtest:%d:", time.Now().UnixNano())
	ctx := context.Background()
	rdb, err := OpenRedis(ctx, url, o, slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		for it := rdb.Client.Scan(ctx, 0, "*"+o.Prefix+"*", 1000).Iterator(); it.Next(ctx); {
			_ = rdb.Client.Del(ctx, it.Val()).Err()
		}
		_ = rdb.Close()
	})
	if err := rdb.Ping(ctx); err != nil {
		tb.Fatalf("test Redis: %v", err)
	}
	return rdb
}
