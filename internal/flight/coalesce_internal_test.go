package flight

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// A hold on a flight nothing else is holding is flushed on its caller's
// goroutine: one customer on a quiet day pays no hand-off to a flushing
// goroutine and back.
func TestLoneHoldIsNotHandedOff(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	svc := NewService(pool, clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute, Coalesce: true})
	id := newTestFlight(t, svc, NewFare{Class: "ECONOMY", Price: 100, Capacity: 9, Seats: []string{"1A", "1B", "1C"}})
	ctx := context.Background()
	for i, seat := range []string{"1A", "1B", "1C"} {
		if _, err := svc.Hold(ctx, HoldRequest{CustomerID: int64(i + 1), FlightID: id, FareClass: "ECONOMY", Seats: []string{seat}}); err != nil {
			t.Fatalf("hold %s: %v", seat, err)
		}
	}
	if _, err := svc.Hold(ctx, HoldRequest{CustomerID: 9, FlightID: id, FareClass: "ECONOMY", Seats: []string{"1A"}}); err == nil {
		t.Fatal("a held seat was held again")
	}
	if n := svc.coalescer.Spawned(); n != 0 {
		t.Errorf("%d flushing goroutines started for holds one at a time, want none", n)
	}
	if n := svc.coalescer.Keys(); n != 0 {
		t.Errorf("%d flight queues left, want none", n)
	}
}

// Holds that arrive while a lone hold is flushed on its caller's goroutine
// queue behind it and go together in the next batch, flushed by a goroutine
// that takes the lone hold's place: here the lone hold waits for the
// counter row another transaction holds, and with one flush at a time the
// three holds behind it make one batch.
func TestHoldsBehindALoneHoldGoTogether(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	svc := NewService(pool, clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute})
	id := newTestFlight(t, svc, NewFare{Class: "ECONOMY", Price: 100, Capacity: 9})
	reg := prometheus.NewRegistry()
	c := newCoalescer(svc, Config{MaxBatch: 64, Flushes: 1, Registry: reg})
	ctx := context.Background()
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	if _, err := other.Exec(ctx, `UPDATE fare_bucket SET held = held + 1 WHERE flight_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		b   *booking.Booking
		err error
	}
	answers := make(chan answer, 4)
	hold := func(customer int64) {
		b, err := c.Do(ctx, id, HoldRequest{CustomerID: customer, FlightID: id, FareClass: "ECONOMY", Quantity: 1})
		answers <- answer{b, err}
	}
	go hold(1)
	// The lone hold waits for the counter row.
	pgtest.AwaitLockWait(t, pool)
	for customer := int64(2); customer <= 4; customer++ {
		go hold(customer)
	}
	waitFor(t, "three holds to queue", func() bool {
		return c.Waiting(id) == 3
	})
	if n := c.Spawned(); n != 0 {
		t.Errorf("%d flushing goroutines started while the lone hold runs with one flush at a time, want none", n)
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		select {
		case a := <-answers:
			if a.err != nil || a.b == nil {
				t.Errorf("hold: booking %v err %v", a.b, a.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a hold got no answer")
		}
	}
	if n := c.Spawned(); n != 1 {
		t.Errorf("%d flushing goroutines started, want 1 (for the three that queued)", n)
	}
	var held int
	if err := pool.QueryRow(ctx, `SELECT sum(held) FROM fare_bucket WHERE flight_id = $1`, id).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 5 {
		t.Errorf("held %d, want 5 (1 by the other transaction, 4 holds)", held)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "berth_hold_batch_size" {
			h := f.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 2 || h.GetSampleSum() != 4 {
				t.Errorf("%d batches of %v holds in all, want 2 (the lone hold, then the three together)", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
	waitFor(t, "the flight's queue to go", func() bool { return c.Keys() == 0 })
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A lone hold that panics (here: a service without a pool) leaves no
// flushing place taken behind it: the flight's queue goes with it.
func TestPanickedLoneHoldLeavesNoQueue(t *testing.T) {
	t.Parallel()
	svc := NewService(nil, clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute, Coalesce: true})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("a hold without a pool did not panic")
			}
		}()
		_, _ = svc.Hold(context.Background(), HoldRequest{CustomerID: 1, FlightID: 1, FareClass: "ECONOMY", Quantity: 1})
	}()
	if n := svc.coalescer.Keys(); n != 0 {
		t.Errorf("%d flight queues left after the panic, want none", n)
	}
}

// Holds batched while the database refuses connections all get its
// refusal (a 503 with Retry-After over HTTP) from their one batch: none is
// tried again alone, which would make each a connection attempt on a
// database that is away or out of connections.
func TestBatchRefusedByTheDatabaseIsNotRetriedAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := NewService(pgtest.Refusing(t), clock.NewFake(epoch), Config{HoldTTL: 10 * time.Minute})
	reg := prometheus.NewRegistry()
	c := newCoalescer(svc, Config{MaxBatch: 64, Flushes: 1, Linger: 200 * time.Millisecond, Registry: reg})
	const holds = 8
	errs := make(chan error, holds)
	start := make(chan struct{})
	for i := range holds {
		go func() {
			<-start
			_, err := c.Do(ctx, 1, HoldRequest{CustomerID: int64(i + 1), FlightID: 1, FareClass: "ECONOMY", Quantity: 1})
			errs <- err
		}()
	}
	close(start)
	for range holds {
		select {
		case err := <-errs:
			if !pg.Refused(err) {
				t.Errorf("hold: %v, want the database's refusal", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a hold got no answer")
		}
	}
	var batches uint64
	fallbacks := -1.0
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "berth_hold_batch_size":
			batches = f.GetMetric()[0].GetHistogram().GetSampleCount()
		case "berth_hold_batch_fallbacks_total":
			fallbacks = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if batches == 0 || batches == holds {
		t.Fatalf("%d batches for %d holds: none was batched, so the test proves nothing", batches, holds)
	}
	if fallbacks != 0 {
		t.Errorf("%g refused batches retried one hold at a time, want none", fallbacks)
	}
}
