package coalesce_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/coalesce"
)

// gated is a Many that records each batch's requests, and holds its first
// batch until release is closed.
type gated struct {
	mu      sync.Mutex
	batches [][]int
	started chan struct{}
	release chan struct{}
	fail    func(batch []int) error
}

func newGated() *gated {
	return &gated{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (g *gated) many(_ context.Context, _ string, batch []*coalesce.Call[int, int]) error {
	reqs := make([]int, len(batch))
	for i, cl := range batch {
		reqs[i] = cl.Req
	}
	g.mu.Lock()
	first := len(g.batches) == 0
	g.batches = append(g.batches, reqs)
	g.mu.Unlock()
	g.started <- struct{}{}
	if first {
		<-g.release
	}
	if g.fail != nil {
		if err := g.fail(reqs); err != nil {
			return err
		}
	}
	for _, cl := range batch {
		cl.Out = cl.Req * 10
	}
	return nil
}

func (g *gated) sizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n []int
	for _, b := range g.batches {
		n = append(n, len(b))
	}
	return n
}

// queueBehindFirst sends request 1 with do and, while its batch runs,
// requests 2, 3 and 4, then lets the first batch finish once the three
// wait for the next.
func (g *gated) queueBehindFirst(t *testing.T, c *coalesce.Coalescer[string, int, int], do func(r int)) {
	t.Helper()
	go do(1)
	<-g.started
	for r := 2; r <= 4; r++ {
		go do(r)
	}
	apptest.Eventually(t, 10*time.Second, "three requests to queue", func() bool { return c.Waiting("k") == 3 })
	close(g.release)
}

var errBusy = errors.New("busy")

func newCoalescer(g *gated, queueWait time.Duration) *coalesce.Coalescer[string, int, int] {
	return coalesce.New(coalesce.Config[string, int, int]{
		Many: g.many, Busy: func(string) error { return errBusy },
		MaxBatch: 64, Flushes: 1, QueueWait: queueWait, Metric: "test_batch", What: "Tests",
	})
}

// Requests that queue behind a running batch go together in the next one;
// when that batch fails as a whole, each request is decided alone, and a
// request whose own batch fails gets the error.
func TestFailedBatchIsDecidedOneByOne(t *testing.T) {
	t.Parallel()
	g := newGated()
	g.fail = func(reqs []int) error {
		if len(reqs) > 1 || reqs[0] == 3 {
			return errors.New("refused")
		}
		return nil
	}
	c := newCoalescer(g, 0)
	type answer struct{ req, out int }
	answers := make(chan answer, 4)
	errs := make(chan error, 4)
	do := func(r int) {
		out, err := c.Do(context.Background(), "k", r)
		if err != nil {
			errs <- err
			return
		}
		answers <- answer{r, out}
	}
	g.queueBehindFirst(t, c, do)
	for range 3 {
		select {
		case a := <-answers:
			if a.out != a.req*10 {
				t.Errorf("request %d answered %d", a.req, a.out)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a request got no answer")
		}
	}
	if err := <-errs; err == nil || err.Error() != "refused" {
		t.Errorf("request 3: %v, want its own batch's error", err)
	}
	// The lone first, the three together, then each of them alone.
	if got := g.sizes(); len(got) != 5 || got[0] != 1 || got[1] != 3 {
		t.Errorf("batch sizes %v, want [1 3 1 1 1]", got)
	}
	apptest.Eventually(t, 10*time.Second, "the key's queue to go", func() bool { return c.Keys() == 0 })
	if n := c.Spawned(); n != 1 {
		t.Errorf("%d flushing goroutines, want 1", n)
	}
}

// An error of a whole batch that says the database refused or lost the
// connection (pg.Away) is every request's: none is tried again alone,
// which would only multiply the load on a database that is away.
func TestSharedErrorIsEveryRequests(t *testing.T) {
	t.Parallel()
	g := newGated()
	errAway := io.ErrUnexpectedEOF // the connection lost mid-answer
	g.fail = func(reqs []int) error {
		if len(reqs) > 1 {
			return fmt.Errorf("hold: %w", errAway)
		}
		return nil
	}
	reg := prometheus.NewRegistry()
	c := coalesce.New(coalesce.Config[string, int, int]{
		Many: g.many, Busy: func(string) error { return errBusy },
		MaxBatch: 64, Flushes: 1, Metric: "test_batch", What: "Tests", Registry: reg,
	})
	errs := make(chan error, 4)
	do := func(r int) {
		_, err := c.Do(context.Background(), "k", r)
		errs <- err
	}
	g.queueBehindFirst(t, c, do)
	failed := 0
	for range 4 {
		select {
		case err := <-errs:
			if err == nil {
				continue
			}
			failed++
			if !errors.Is(err, errAway) {
				t.Errorf("%v, want the batch's own error", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a request got no answer")
		}
	}
	if failed != 3 {
		t.Errorf("%d requests failed, want the batch's 3", failed)
	}
	// The lone first (served), then the three together, and nothing alone.
	if got := g.sizes(); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Errorf("batch sizes %v, want [1 3]", got)
	}
	if n := apptest.Metric(t, reg, "test_batch_fallbacks_total"); n != 0 {
		t.Errorf("%g batches retried one by one, want none", n)
	}
}

// A request whose batch does not start within the queue wait is answered
// Busy and left out of the batch; the others are served.
func TestQueuedTooLongIsBusy(t *testing.T) {
	t.Parallel()
	g := newGated()
	c := newCoalescer(g, 50*time.Millisecond)
	first := make(chan error, 1)
	go func() { _, err := c.Do(context.Background(), "k", 1); first <- err }()
	<-g.started
	second := make(chan error, 1)
	go func() { _, err := c.Do(context.Background(), "k", 2); second <- err }()
	select {
	case err := <-second:
		if !errors.Is(err, errBusy) {
			t.Errorf("a request queued past the wait: %v, want busy", err)
		}
	case <-time.After(10 * time.Second):
		close(g.release)
		t.Fatal("a request queued past the wait got no answer within 10 s")
	}
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	apptest.Eventually(t, 10*time.Second, "the key's queue to go", func() bool { return c.Keys() == 0 })
	if got := g.sizes(); len(got) != 1 {
		t.Errorf("batch sizes %v, want only the first request's", got)
	}
}

// Coalescers that share Slots run no more batches at once than it has
// slots, whatever the keys. A request that finds every slot taken waits
// in its key's queue, not in a batch: it is answered Busy after the queue
// wait, never sent, and the next request of its key goes once a slot is
// free.
func TestSlotsBoundTheBatchesOfEveryKey(t *testing.T) {
	t.Parallel()
	slots := coalesce.NewSlots(1)
	g := newGated()
	mk := func(m func(context.Context, string, []*coalesce.Call[int, int]) error, wait time.Duration) *coalesce.Coalescer[string, int, int] {
		return coalesce.New(coalesce.Config[string, int, int]{
			Many: m, Busy: func(string) error { return errBusy }, Slots: slots,
			MaxBatch: 64, Flushes: 4, QueueWait: wait, Metric: "test_batch", What: "Tests",
		})
	}
	flights, cars := mk(g.many, 50*time.Millisecond), mk(g.many, 50*time.Millisecond)
	first := make(chan error, 1)
	go func() { _, err := flights.Do(context.Background(), "a", 1); first <- err }()
	<-g.started
	for name, c := range map[string]*coalesce.Coalescer[string, int, int]{"another key": flights, "another coalescer": cars} {
		if _, err := c.Do(context.Background(), "b", 2); !errors.Is(err, errBusy) {
			t.Errorf("%s while the only slot is taken: %v, want busy", name, err)
		}
	}
	if got := g.sizes(); len(got) != 1 {
		t.Errorf("batch sizes %v, want only the first request's: a request without a slot was sent", got)
	}
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if out, err := cars.Do(context.Background(), "b", 3); err != nil || out != 30 {
		t.Errorf("a request once the slot is free: %d, %v", out, err)
	}

	// Many requests on many keys: never more batches at once than slots,
	// and every request answered.
	const n = 3
	shared := coalesce.NewSlots(n)
	var running, most atomic.Int64
	many := func(_ context.Context, _ string, batch []*coalesce.Call[int, int]) error {
		now := running.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		for _, cl := range batch {
			cl.Out = cl.Req
		}
		return nil
	}
	cs := make([]*coalesce.Coalescer[string, int, int], 2)
	for i := range cs {
		cs[i] = coalesce.New(coalesce.Config[string, int, int]{
			Many: many, Busy: func(string) error { return errBusy }, Slots: shared,
			MaxBatch: 4, Flushes: 4, Metric: "test_batch", What: "Tests",
		})
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	var answered atomic.Int64
	for i := range 400 {
		wg.Go(func() {
			<-start
			out, err := cs[i%2].Do(context.Background(), string(rune('a'+i%10)), i)
			if err == nil && out == i {
				answered.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := answered.Load(); got != 400 {
		t.Errorf("%d of 400 requests answered", got)
	}
	if got := most.Load(); got > n {
		t.Errorf("%d batches at once, want at most %d", got, n)
	}
}

// A request given WaitUntil waits for its batch until then, if that is
// sooner than the queue wait: what it waited before the coalescer counts.
// Already past, it is answered Busy as soon as it would have to queue.
func TestWaitUntilShortensTheQueueWait(t *testing.T) {
	t.Parallel()
	g := newGated()
	c := newCoalescer(g, time.Minute)
	first := make(chan error, 1)
	go func() { _, err := c.Do(context.Background(), "k", 1); first <- err }()
	<-g.started
	for _, left := range []time.Duration{50 * time.Millisecond, -time.Second} {
		start := time.Now()
		_, err := c.Do(coalesce.WaitUntil(context.Background(), start.Add(left)), "k", 2)
		if !errors.Is(err, errBusy) {
			t.Errorf("queued with %v left: %v, want busy", left, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("queued with %v left: answered after %v, the queue wait", left, d)
		}
	}
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if got := g.sizes(); len(got) != 1 {
		t.Errorf("batch sizes %v, want only the first request's", got)
	}
}

// A queue whose batches' oldest requests wait longer than the target for
// a whole queue wait is standing: a request queued then is answered Busy
// after twice the target, not after the queue wait. A burst shorter than
// the queue wait is waited out in full, and once a request finds its key
// idle the queue waits in full again.
func TestStandingQueueShedsSooner(t *testing.T) {
	t.Parallel()
	const queueWait, target = time.Second, 50 * time.Millisecond
	started, step := make(chan int, 10), make(chan struct{})
	reg := prometheus.NewRegistry()
	c := coalesce.New(coalesce.Config[string, int, int]{
		Many: func(_ context.Context, _ string, batch []*coalesce.Call[int, int]) error {
			started <- batch[0].Req
			<-step
			for _, cl := range batch {
				cl.Out = cl.Req * 10
			}
			return nil
		},
		Busy:     func(string) error { return errBusy },
		MaxBatch: 64, Flushes: 1, QueueWait: queueWait, Target: target, Metric: "test", What: "Tests",
		Registry: reg,
	})
	type answer struct {
		out  int
		err  error
		took time.Duration
	}
	do := func(r int) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			start := time.Now()
			out, err := c.Do(context.Background(), "k", r)
			ch <- answer{out, err, time.Since(start)}
		}()
		return ch
	}
	served := func(r int, ch <-chan answer) {
		t.Helper()
		if a := <-ch; a.err != nil || a.out != r*10 {
			t.Errorf("request %d: %d %v after %v, want it served", r, a.out, a.err, a.took)
		}
	}
	// next is the first request of the next batch to start.
	next := func() int {
		t.Helper()
		select {
		case r := <-started:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no batch started within 10 s")
			return 0
		}
	}
	queue := func(r int) <-chan answer {
		ch := do(r)
		apptest.Eventually(t, 10*time.Second, "a request to queue", func() bool { return c.Waiting("k") == 1 })
		return ch
	}
	// Each request after the first waits behind the one before, longer
	// than the target: the queue stands from the second batch on.
	ans := map[int]<-chan answer{1: do(1)}
	next()
	holds := []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 600 * time.Millisecond}
	for i, hold := range holds {
		r := i + 2
		ans[r] = queue(r)
		time.Sleep(hold)
		step <- struct{}{}
		if got := next(); got != r {
			t.Fatalf("batch of %d started, want %d", got, r)
		}
	}
	// The queue has stood for 1.2 s, more than the queue wait: a request
	// queued now waits twice the target.
	a := <-do(5)
	if !errors.Is(a.err, errBusy) || a.took >= queueWait {
		t.Errorf("queued in a standing queue: %v after %v, want busy before the queue wait (%v)", a.err, a.took, queueWait)
	}
	if n := apptest.Metric(t, reg, "test_standing"); n != 1 {
		t.Errorf("%v keys standing, want 1", n)
	}
	step <- struct{}{}
	for r := 1; r <= 4; r++ {
		served(r, ans[r])
	}
	apptest.Eventually(t, 10*time.Second, "the key's queue to go", func() bool { return c.Keys() == 0 })
	if n := apptest.Metric(t, reg, "test_standing"); n != 0 {
		t.Errorf("%v keys standing once the key went idle, want 0", n)
	}
	// An idle key: the queue no longer stands, and a request queued behind
	// another waits for it longer than twice the target.
	ans[6] = do(6)
	next()
	ans[7] = queue(7)
	time.Sleep(300 * time.Millisecond)
	step <- struct{}{}
	if got := next(); got != 7 {
		t.Fatalf("batch of %d started, want 7", got)
	}
	step <- struct{}{}
	served(6, ans[6])
	served(7, ans[7])
}
