package events_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/events"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
)

// txCounter counts the transactions a pool ends: COMMIT and ROLLBACK
// statements (pgx ends its transactions with them).
type txCounter struct {
	mu               sync.Mutex
	begins, commits  int
	rollbacks, other int
}

func (c *txCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch strings.ToLower(strings.TrimSpace(d.SQL)) {
	case "begin":
		c.begins++
	case "commit":
		c.commits++
	case "rollback":
		c.rollbacks++
	default:
		c.other++
	}
	return ctx
}
func (c *txCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *txCounter) counts() (begins, commits, rollbacks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.begins, c.commits, c.rollbacks
}

// TestInProcessBatchIsOneCommit: the relay claims a batch, every in-process
// consumer records its effects and processed marks, and the batch is marked
// published, all in one transaction: one commit for the batch, whatever the
// number of consumers, and no rollback. A relay with nothing to do begins
// no transaction at all: its polls look without one.
func TestInProcessBatchIsOneCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	ids := e.workload(t, 6, 3, 2, nil)
	counter := &txCounter{}
	pool, err := pg.Open(context.Background(), e.url, pg.PoolConfig{MaxConns: 4, Tracer: counter})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	d := e.dispatcher(prometheus.NewRegistry())
	d.DB = pool
	rec := newRecorder("recorder")
	consumers := []events.Consumer{events.Tickets{Clock: e.clock}, rec, newRecorder("second")}
	r := &outbox.Relay{DB: pool, Pub: events.InProcess{D: d, Consumers: consumers}, Clock: e.clock, Log: e.log}
	n, err := r.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n < len(ids)*3 {
		t.Fatalf("the pass published %d events, want at least %d", n, len(ids)*3)
	}
	begins, commits, rollbacks := counter.counts()
	if begins != 1 || commits != 1 || rollbacks != 0 {
		t.Errorf("a pass of %d events to %d consumers: %d begins, %d commits, %d rollbacks; want one transaction that commits",
			n, len(consumers), begins, commits, rollbacks)
	}
	e.waitDelivered(t, "recorder", 10*time.Second)
	rec.check(t)
	e.checkTickets(t)

	// Nothing left: a relay running for a while, woken by nothing but its
	// polls, begins nothing.
	ctx, cancel := context.WithCancel(context.Background())
	r2 := &outbox.Relay{DB: pool, Pub: events.InProcess{D: d, Consumers: consumers}, Clock: e.clock, Log: e.log,
		PollInterval: 20 * time.Millisecond, Wake: make(chan struct{})}
	done := make(chan struct{})
	go func() { defer close(done); r2.Run(ctx) }()
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-done
	b2, c2, r2n := counter.counts()
	if b2-begins+c2-commits+r2n-rollbacks > 0 {
		t.Errorf("an idle relay made %d begins, %d commits, %d rollbacks in 300 ms of 20 ms polls", b2-begins, c2-commits, r2n-rollbacks)
	}
}
