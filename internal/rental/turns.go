package rental

import (
	"sync"
)

// turns lets, in one process, one hold of a car at a time ask the
// database; the others wait for it to end, holding no connection and no
// lock, and then read the car's calendar together (without a lock), so
// that when a crowd races for one car the losers see the winner's committed
// booking at once, in parallel, instead of each in turn. It decides
// nothing (the exclusion constraint does, across processes); it only keeps
// a crowd from filling the pool with transactions that wait on the car's
// row.
type turns struct {
	mu  sync.Mutex
	car map[int64]*turn
}

// turn is the state of one car's holds in this process; it exists while
// a hold of the car is in Service.Hold.
type turn struct {
	users int           // holds of the car between join and part
	busy  bool          // a hold of the car is asking the database
	ended uint64        // how many holds of the car have ended their turn
	done  chan struct{} // closed when the running hold ends its turn
}

func newTurns() *turns { return &turns{car: make(map[int64]*turn)} }

// join registers a hold of car; part must follow.
func (t *turns) join(car int64) *turn {
	t.mu.Lock()
	defer t.mu.Unlock()
	tn, ok := t.car[car]
	if !ok {
		tn = &turn{}
		t.car[car] = tn
	}
	tn.users++
	return tn
}

// part forgets a hold of car that join registered.
func (t *turns) part(car int64, tn *turn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tn.users--
	if tn.users == 0 {
		delete(t.car, car)
	}
}

// try takes the car's turn when no hold of it runs (ok); otherwise it
// returns the channel closed when the running one ends. ended is how many
// turns had ended when it looked.
func (t *turns) try(tn *turn) (ok bool, ended uint64, done <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tn.busy {
		return false, tn.ended, tn.done
	}
	tn.busy, tn.done = true, make(chan struct{})
	return true, tn.ended, nil
}

// ended is how many turns of the car have ended.
func (t *turns) endedOf(tn *turn) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return tn.ended
}

// release ends the turn that try gave, waking every hold waiting for it.
func (t *turns) release(tn *turn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tn.busy = false
	tn.ended++
	close(tn.done)
}
