package rental

import (
	"context"
	"sync"
)

// turns queues, in one process, the holds of one car: one at a time asks
// the database, the others wait here, holding no connection and no lock.
// It decides nothing (the exclusion constraint does, across processes); it
// only keeps a crowd racing for one car from filling the pool with
// transactions that wait on the car's row, and lets each of them, when its
// turn comes, see the winner's committed booking with one plain read.
type turns struct {
	mu  sync.Mutex
	car map[int64]*turn
}

type turn struct {
	ch      chan struct{} // holds one token while a hold of the car runs
	waiting int           // holds that entered and have not left
}

func newTurns() *turns { return &turns{car: make(map[int64]*turn)} }

// enter waits for car's turn, at most until ctx ends, and returns the
// function that gives it to the next.
func (t *turns) enter(ctx context.Context, car int64) (func(), error) {
	t.mu.Lock()
	tn, ok := t.car[car]
	if !ok {
		tn = &turn{ch: make(chan struct{}, 1)}
		t.car[car] = tn
	}
	tn.waiting++
	t.mu.Unlock()
	leave := func() {
		t.mu.Lock()
		tn.waiting--
		if tn.waiting == 0 {
			delete(t.car, car)
		}
		t.mu.Unlock()
	}
	select {
	case tn.ch <- struct{}{}:
		return func() { <-tn.ch; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}
