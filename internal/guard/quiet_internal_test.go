package guard

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sendLog counts the commands a client sends; with wait set, each command
// waits for it to be closed before it is sent (it stays in flight).
type sendLog struct {
	sent atomic.Int32
	wait chan struct{}
}

func (l *sendLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *sendLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "hello" || cmd.Name() == "client" { // a connection being made
			return next(ctx, cmd)
		}
		l.sent.Add(1)
		if l.wait != nil {
			<-l.wait
		}
		return next(ctx, cmd)
	}
}

func (l *sendLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The layers' commands go straight while few are in flight and to the
// auto-pipeliner once pipelineFrom are: here two clients of the test Redis
// stand for the two ways, each counting what it sent.
func TestQuietCommandsGoStraightACrowdsArePipelined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := openTestRedis(t, RedisOptions{})
	straight, piped := &sendLog{}, &sendLog{}
	quiet := redis.NewClient(rdb.Client.Options())
	busy := redis.NewClient(rdb.Client.Options())
	t.Cleanup(func() { _ = quiet.Close(); _ = busy.Close() })
	quiet.AddHook(straight)
	busy.AddHook(piped)
	q := &quietOrBusy{Client: quiet, busy: busy}
	key := rdb.Prefix + "quiet"
	script := redis.NewScript(`return redis.call('INCR', KEYS[1])`)

	// One at a time: every kind of command the layers send goes straight.
	for range 5 {
		if err := script.Run(ctx, q, []string{key}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := q.SetNX(ctx, key+"x", 1, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := q.Del(ctx, key+"x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if s, p := straight.sent.Load(), piped.sent.Load(); s < 15 || p != 0 {
		t.Fatalf("one at a time: %d sent straight, %d pipelined; want 15 or more (a script may be sent twice) and 0", s, p)
	}

	// pipelineFrom commands kept in flight: the next ones are pipelined.
	straight.sent.Store(0)
	straight.wait = make(chan struct{})
	var wg sync.WaitGroup
	for range pipelineFrom {
		wg.Go(func() { _ = q.SetNX(ctx, key+"held", 1, time.Minute).Err() })
	}
	for deadline := time.Now().Add(5 * time.Second); straight.sent.Load() < pipelineFrom; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d commands in flight after 5 s", straight.sent.Load(), pipelineFrom)
		}
		time.Sleep(time.Millisecond)
	}
	crowd := make(chan error, 1)
	go func() {
		for range 3 {
			if err := q.Del(ctx, key+"y").Err(); err != nil {
				crowd <- err
				return
			}
		}
		crowd <- nil
	}()
	select {
	case err := <-crowd:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(5 * time.Second):
		t.Error("with the straight commands in flight, the next ones waited behind them")
	}
	close(straight.wait)
	wg.Wait()
	if s, p := straight.sent.Load(), piped.sent.Load(); s != pipelineFrom || p != 3 {
		t.Errorf("with %d in flight: %d more sent straight, %d pipelined; want 0 and 3", pipelineFrom, s-pipelineFrom, p)
	}
	// And once they are answered, straight again.
	if err := q.Del(ctx, key+"z").Err(); err != nil {
		t.Fatal(err)
	}
	if s := straight.sent.Load(); s != pipelineFrom+1 {
		t.Errorf("after the crowd: %d sent straight, want %d", s-pipelineFrom, 1)
	}
}
