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
// seat, a customer under the hold limit) sends Redis two scripts and
// nothing else: the seat gate's and the hold limit's, sent at the same
// time (each GET, SET and TIME that Redis counts runs inside them). Its
// success sends nothing more: the seat key stays until its TTL, the
// reservation is kept. A command added to this path shows here, and so
// does a script Warm left out of Redis's cache (the hold would be told
// NOSCRIPT and send it again: a second round trip in sequence).
func TestLoneHoldSendsTwoScripts(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	rdb := openTestRedis(t, RedisOptions{AutoPipeline: true, MinIdle: 1})
	g := New(base.Archetype{Log: log, Clock: clock.System{}, Registry: prometheus.NewRegistry()},
		Config{On: true, HoldLimit: Rate{N: 100, Window: time.Hour}, Lanes: LanesFor(4), ShedWait: 150 * time.Millisecond}, rdb, pgtest.NewPool(t))
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
	for i := range 20 {
		in := Intent{Customer: 9, FlightID: 1, FareClass: "ECONOMY", Seats: []string{fmt.Sprintf("%dA", i+1)}, Units: 1}
		if err := g.Hold(ctx, in, func(context.Context) error { return nil }); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
		var sent []string
		for _, b := range l.take() {
			for _, c := range b {
				if c != "hello" && c != "ping" && c != "client" { // a connection being made
					sent = append(sent, c)
				}
			}
		}
		if len(sent) != 2 || sent[0] != "evalsha" || sent[1] != "evalsha" {
			t.Errorf("hold %d sent %v to Redis, want two scripts (the seat gate, the hold limit)", i, sent)
		}
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
