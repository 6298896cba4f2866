package coalesce_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
	go do(1)
	<-g.started
	for r := 2; r <= 4; r++ {
		go do(r)
	}
	apptest.Eventually(t, 10*time.Second, "three requests to queue", func() bool { return c.Waiting("k") == 3 })
	close(g.release)
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
