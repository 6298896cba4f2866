package bench

import (
	"context"
	"errors"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Outcomes a request can end with besides "<status>" and "<status> <code>".
const (
	OutcomeTimeout   = "timeout"         // no answer within the request's time budget
	OutcomeTransport = "transport error" // connection refused, reset, …
	// OutcomeUnsent is a request whose scheduled time came but the client
	// could not send it before the run's end: every client was still waiting
	// for earlier answers. Its latency is a lower bound (from its scheduled
	// time to the end of the run).
	OutcomeUnsent = "unsent"
	// OutcomeCutOff is a request still waiting for its answer when the
	// run's drain time ran out: the run gave up on it.
	OutcomeCutOff = "cut off"
)

// Well-known outcomes, in the order tables show them.
var knownOutcomes = []string{
	"200", "201",
	"409 seat_unavailable", "409 sold_out", "409 car_unavailable",
	"429 waiting_room", "429 rate_limited", "503 overloaded",
}

// outcomeOf names how a request ended: "201", "409 sold_out", "timeout".
func outcomeOf(status int, code string, err error) string {
	if err != nil {
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			return OutcomeTimeout
		}
		return OutcomeTransport
	}
	s := strconv.Itoa(status)
	if status < 300 || code == "" {
		return s
	}
	return s + " " + code
}

// isServerError reports whether an outcome is a 5xx answer other than the
// load shedding that docs/api.md allows (503 overloaded): those fail the run.
func isServerError(outcome string) bool {
	return strings.HasPrefix(outcome, "5") && outcome != "503 overloaded"
}

// isTransport reports whether an outcome is a request that got no answer.
func isTransport(outcome string) bool {
	return outcome == OutcomeTimeout || outcome == OutcomeTransport
}

// sortOutcomes orders outcomes as tables show them: the well-known ones
// first, then the rest alphabetically.
func sortOutcomes(list []string) {
	rank := func(o string) int {
		for i, k := range knownOutcomes {
			if k == o {
				return i
			}
		}
		return len(knownOutcomes)
	}
	sort.Slice(list, func(i, j int) bool {
		ri, rj := rank(list[i]), rank(list[j])
		if ri != rj {
			return ri < rj
		}
		return list[i] < list[j]
	})
}

// recorder collects every request's outcome and latency, overall and per
// second of the run, for each operation ("hold", "pay", "search", …). It is
// safe for concurrent use.
type recorder struct {
	start time.Time

	mu      sync.Mutex
	last    time.Time // when the last answer arrived
	ops     map[string]*opTally
	seconds []*secondTally
	// slices: op → the requests sent (scheduled, for scheduled ones) in
	// each 100 ms slice of the first seconds, with their latencies.
	slices  map[string]*[firstSlices]hist
	samples map[string]string // one transport error message per outcome, for the report
}

// firstSlices is how many 100 ms slices of the start of a run the report
// shows one by one: a sale's first seconds.
const (
	firstSlices = 20
	sliceLen    = 100 * time.Millisecond
)

type opTally struct {
	offered  int
	outcomes map[string]*hist
	all      hist
}

type secondTally struct {
	offered  map[string]int   // op → requests scheduled in this second
	outcomes map[string]*hist // "op outcome" → requests that ended in this second
	all      hist             // every answer in this second (see answered)
}

func newRecorder(start time.Time) *recorder {
	return &recorder{start: start, ops: map[string]*opTally{}, slices: map[string]*[firstSlices]hist{}, samples: map[string]string{}}
}

func (r *recorder) op(name string) *opTally {
	t := r.ops[name]
	if t == nil {
		t = &opTally{outcomes: map[string]*hist{}}
		r.ops[name] = t
	}
	return t
}

func (r *recorder) second(at time.Time) *secondTally {
	i := max(int(at.Sub(r.start)/time.Second), 0)
	for len(r.seconds) <= i {
		r.seconds = append(r.seconds, &secondTally{offered: map[string]int{}, outcomes: map[string]*hist{}})
	}
	return r.seconds[i]
}

// offered counts a request of op scheduled at at.
func (r *recorder) offered(op string, at time.Time) {
	r.mu.Lock()
	r.op(op).offered++
	r.second(at).offered[op]++
	r.mu.Unlock()
}

// done records how a request of op ended at end, and its latency.
func (r *recorder) done(op, outcome string, latency time.Duration, end time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.op(op)
	h := t.outcomes[outcome]
	if h == nil {
		h = &hist{}
		t.outcomes[outcome] = h
	}
	h.add(latency)
	t.all.add(latency)
	if answered(outcome) && end.After(r.last) {
		r.last = end
	}
	s := r.second(end)
	key := op + " " + outcome
	sh := s.outcomes[key]
	if sh == nil {
		sh = &hist{}
		s.outcomes[key] = sh
	}
	sh.add(latency)
	if answered(outcome) {
		s.all.add(latency)
		if k := int(end.Add(-latency).Sub(r.start) / sliceLen); k >= 0 && k < firstSlices {
			sl := r.slices[op]
			if sl == nil {
				sl = &[firstSlices]hist{}
				r.slices[op] = sl
			}
			sl[k].add(latency)
		}
	}
}

// answered reports whether an outcome ended a request that was sent and
// either answered or failed, rather than never sent, given up at the end,
// or skipped.
func answered(outcome string) bool {
	return outcome != OutcomeUnsent && outcome != OutcomeCutOff && outcome != OutcomeSkipped
}

// sample keeps the first message seen for a failed outcome.
func (r *recorder) sample(outcome string, err error) {
	if err == nil {
		return
	}
	r.mu.Lock()
	if _, ok := r.samples[outcome]; !ok {
		r.samples[outcome] = err.Error()
	}
	r.mu.Unlock()
}

// progress summarises second i for the progress line.
type progress struct {
	offered  int
	answered int
	outcomes map[string]int // outcome (ops merged) → count
	p99      time.Duration
}

func (r *recorder) progressOf(i int) progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := progress{outcomes: map[string]int{}}
	if i < 0 || i >= len(r.seconds) {
		return p
	}
	s := r.seconds[i]
	for _, n := range s.offered {
		p.offered += n
	}
	for key, h := range s.outcomes {
		_, outcome, _ := strings.Cut(key, " ")
		p.outcomes[outcome] += int(h.n)
	}
	p.answered = int(s.all.n)
	p.p99 = s.all.quantile(0.99)
	return p
}
