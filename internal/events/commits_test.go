package events_test

import (
	"context"
	"fmt"
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

// sqlCounter counts the statements a pool sends whose text contains one of
// its words.
type sqlCounter struct {
	mu    sync.Mutex
	words []string
	n     map[string]int
}

func (c *sqlCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.words {
		if strings.Contains(d.SQL, w) {
			c.n[w]++
		}
	}
	return ctx
}
func (c *sqlCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestTicketsTakeABatchOfHoldsInOneStatement: the booking.held events of a
// relay batch only move the tickets consumer's record of each booking's
// version, which one statement does for the whole batch instead of one per
// hold (the relay's share of a quiet day's round trips); the bookings
// confirmed and cancelled later still get their tickets, exactly.
func TestTicketsTakeABatchOfHoldsInOneStatement(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	f := e.createFlight(t)
	const holds = 12
	for i := range holds {
		if _, err := e.hold(context.Background(), f, []string{fmt.Sprintf("%d%c", 1+i/6, "ABCDEF"[i%6])}, 0); err != nil {
			t.Fatal(err)
		}
	}
	counter := &sqlCounter{words: []string{"ticket_booking"}, n: map[string]int{}}
	pool, err := pg.Open(context.Background(), e.url, pg.PoolConfig{MaxConns: 2, Tracer: counter})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	d := e.dispatcher(prometheus.NewRegistry())
	d.DB = pool
	r := &outbox.Relay{DB: pool, Pub: events.InProcess{D: d, Consumers: []events.Consumer{events.Tickets{Clock: e.clock}}}, Clock: e.clock, Log: e.log}
	n, err := r.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != holds {
		t.Fatalf("the pass published %d events, want %d", n, holds)
	}
	if got := counter.n["ticket_booking"]; got != 1 {
		t.Errorf("the tickets consumer took %d held events in %d statements, want 1", holds, got)
	}
	// The rest of the bookings' lives, through the same relay.
	e.workload(t, 6, 12, 2, nil)
	for {
		n, err := r.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	e.checkTickets(t)
}

// TestRelayCommitsWithoutWaitingForTheFlush: a relay pass (in process: its
// consumers' work with it) commits with synchronous_commit off, since a
// pass lost in a crash is published again and deduplicated; the setting is
// the pass's own, and the holds and every other transaction on the same
// connections keep the database's durable commits.
func TestRelayCommitsWithoutWaitingForTheFlush(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	// The test servers run without durable commits altogether: make this
	// database's sessions durable, as production's are.
	if _, err := e.pool.Exec(context.Background(), `DO $$ BEGIN
		EXECUTE format('ALTER DATABASE %I SET synchronous_commit = on', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	pool, err := pg.Open(context.Background(), e.url, pg.PoolConfig{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	f := e.createFlight(t)
	if _, err := e.hold(context.Background(), f, []string{"1A"}, 0); err != nil {
		t.Fatal(err)
	}
	seen := &settingSeen{}
	d := e.dispatcher(prometheus.NewRegistry())
	d.DB = pool
	r := &outbox.Relay{DB: pool, Pub: events.InProcess{D: d, Consumers: []events.Consumer{seen}}, Clock: e.clock, Log: e.log}
	if n, err := r.Pass(context.Background()); err != nil || n != 1 {
		t.Fatalf("pass: %d events, %v", n, err)
	}
	if seen.setting != "off" {
		t.Errorf("a consumer in the relay's transaction saw synchronous_commit = %q, want off", seen.setting)
	}
	var after string
	if err := pool.QueryRow(context.Background(), `SHOW synchronous_commit`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != "on" {
		t.Errorf("after the pass, its connection commits with synchronous_commit = %q, want on", after)
	}
}

// settingSeen is a consumer that notes the synchronous_commit of the
// transaction it handles an event in.
type settingSeen struct{ setting string }

func (s *settingSeen) Name() string { return "setting" }
func (s *settingSeen) Handle(ctx context.Context, tx pgx.Tx, _ events.Event) error {
	return tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&s.setting)
}
