package guard

import (
	"context"
	"errors"
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
	"berth.dev/berth/internal/fault"
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
// inside it), and, its hold made, one more that marks its keys held, each
// by its hash, so a script Warm left out of Redis's cache shows here too
// (the hold would be told NOSCRIPT and send it again: a second round trip
// in sequence). A command added to either path shows.
func TestLoneHoldSendsNothingACrowdTheGate(t *testing.T) {
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
	if s := sent(); len(s) != 2 || s[0] != "evalsha" || s[1] != "evalsha" {
		t.Errorf("the fifth hold in flight sent %v to Redis, want two scripts by their hashes (the seat gate's "+
			"entry, and its mark once the hold is made)", s)
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

// A seat whose hold is in flight is no reason to refuse another buyer: that
// hold may fail (its customer is over the hold limit, its request names a
// seat that does not exist). The gate makes the second buyer wait for the
// first hold's answer: refused, the second reaches the database and gets
// the seat; made, the second is turned away as the seat is now held.
// Only a held seat is refused without waiting. The second buyer may be in
// the first's process (woken in process) or another (asking Redis again).
// A hold still undecided after the wait (a third of the shed wait) is
// taken as made: the buyer gets 409 without the database.
func TestSeatGateWaitsForAHoldInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := openTestRedis(t, RedisOptions{})
	pool := pgtest.NewPool(t)
	process := func() *Guard {
		return New(base.Archetype{Log: slog.New(slog.DiscardHandler), Clock: clock.System{}, Registry: prometheus.NewRegistry()},
			Config{On: true, Lanes: LanesFor(8), ShedWait: 2 * time.Second, QuietHolds: -1}, rdb, pool)
	}
	g, other := process(), process()
	seat := func(customer int64) Intent {
		return Intent{Customer: customer, FlightID: 1, FareClass: "ECONOMY", Seats: []string{"1A"}, Units: 1}
	}
	for _, first := range []struct {
		name   string
		err    error // the first hold's answer from the database
		second *Guard
		want   string
	}{
		{"refused, same process", fault.New(fault.RateLimited, "over the hold limit"), g, "held"},
		{"made, same process", nil, g, "409 seat_unavailable"},
		{"refused, other process", fault.New(fault.RateLimited, "over the hold limit"), other, "held"},
		{"made, other process", nil, other, "409 seat_unavailable"},
	} {
		t.Run(first.name, func(t *testing.T) {
			g.Gate.Forget(ctx, 1, "ECONOMY", []string{"1A"})
			other.Gate.Forget(ctx, 1, "ECONOMY", []string{"1A"})
			inCall, decide := make(chan struct{}), make(chan struct{})
			firstDone := make(chan error, 1)
			go func() {
				firstDone <- g.Hold(ctx, seat(1), func(context.Context) error { close(inCall); <-decide; return first.err })
			}()
			<-inCall
			secondDone := make(chan string, 1)
			go func() {
				asked := false
				err := first.second.Hold(ctx, seat(2), func(context.Context) error { asked = true; return nil })
				switch {
				case err == nil && asked:
					secondDone <- "held"
				case fault.Is(err, fault.SeatUnavailable) && !asked:
					secondDone <- "409 seat_unavailable"
				default:
					secondDone <- fmt.Sprintf("%v (database asked: %v)", err, asked)
				}
			}()
			select {
			case got := <-secondDone:
				t.Fatalf("the second buyer was answered %q while the first hold was in flight", got)
			case <-time.After(100 * time.Millisecond):
			}
			close(decide)
			if err := <-firstDone; !errors.Is(err, first.err) {
				t.Fatalf("first hold: %v, want %v", err, first.err)
			}
			if got := <-secondDone; got != first.want {
				t.Errorf("second buyer: %s, want %s", got, first.want)
			}
			// The seat is now held: a third buyer is refused at once.
			start := time.Now()
			err := g.Hold(ctx, seat(3), func(context.Context) error { return nil })
			if !fault.Is(err, fault.SeatUnavailable) || time.Since(start) > time.Second {
				t.Errorf("third buyer of a held seat: %v after %v, want 409 seat_unavailable at once", err, time.Since(start))
			}
		})
	}
	t.Run("undecided", func(t *testing.T) {
		g.Gate.Forget(ctx, 1, "ECONOMY", []string{"1A"})
		other.Gate.Forget(ctx, 1, "ECONOMY", []string{"1A"})
		inCall, decide := make(chan struct{}), make(chan struct{})
		firstDone := make(chan error, 1)
		go func() {
			firstDone <- g.Hold(ctx, seat(1), func(context.Context) error { close(inCall); <-decide; return nil })
		}()
		<-inCall
		for name, second := range map[string]*Guard{"same process": g, "other process": other} {
			asked, start := false, time.Now()
			err := second.Hold(ctx, seat(2), func(context.Context) error { asked = true; return nil })
			if waited := time.Since(start); !fault.Is(err, fault.SeatUnavailable) || asked || waited < 500*time.Millisecond {
				t.Errorf("%s: %v after %v (database asked: %v), want 409 seat_unavailable after the wait (2 s / 3), without the database",
					name, err, waited, asked)
			}
		}
		close(decide)
		if err := <-firstDone; err != nil {
			t.Fatal(err)
		}
	})
}
