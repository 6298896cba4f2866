package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// OutcomeSkipped is a follow-up (a payment, a waiting-room journey) the
// client did not start because too many were already in progress.
const OutcomeSkipped = "skipped"

// stream is one kind of request scheduled at a fixed rate.
type stream struct {
	op    string
	rate  float64
	conns int // requests of this stream in flight at most
	// send performs request i, due at sched, and records its outcome
	// (through openLoop.timed).
	send func(ctx context.Context, i int64, sched time.Time)
}

// openLoop schedules requests at their offered rate whatever the answers:
// request i of a stream is due at start + i/rate. A client sends it as
// soon as it is due and free; its latency counts from when it was due, so
// a server that answers slowly shows its whole queue (no coordinated
// omission). Nothing is scheduled after end; whatever is not answered by
// deadline (end + drain) is given up, and due requests no client could
// send by then are recorded as unsent. Every scheduled request ends with
// exactly one outcome.
type openLoop struct {
	client   *client
	rec      *recorder
	start    time.Time
	end      time.Time
	deadline time.Time
	timeout  time.Duration

	followSem chan struct{}
	follows   sync.WaitGroup
	inFlight  atomic.Int64
}

func newOpenLoop(c *client, start time.Time, dur, drain, timeout time.Duration, maxFollow int) *openLoop {
	return &openLoop{
		client: c, rec: newRecorder(start), start: start, end: start.Add(dur), deadline: start.Add(dur + drain),
		timeout: timeout, followSem: make(chan struct{}, maxFollow),
	}
}

// total is how many requests a stream schedules.
func (l *openLoop) total(s stream) int64 {
	return int64(scheduledCount(s.rate, l.end.Sub(l.start)))
}

// scheduledCount is how many requests a stream of rate a second schedules
// in dur.
func scheduledCount(rate float64, dur time.Duration) int {
	return int(rate * dur.Seconds())
}

// run runs the streams to the end and waits for their follow-ups.
func (l *openLoop) run(ctx context.Context, streams []stream) {
	var wg sync.WaitGroup
	for _, s := range streams {
		total := l.total(s)
		var next atomic.Int64
		for range min(int64(s.conns), max(total, 1)) {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= total {
						return
					}
					sched := l.start.Add(time.Duration(float64(i) * float64(time.Second) / s.rate))
					l.rec.offered(s.op, sched)
					sleepUntil(ctx, sched)
					if now := time.Now(); !now.Before(l.deadline) || ctx.Err() != nil {
						l.rec.done(s.op, OutcomeUnsent, now.Sub(sched), now)
						continue
					}
					s.send(ctx, i, sched)
				}
			})
		}
	}
	wg.Wait()
	l.follows.Wait()
}

// timed sends k for op, records its outcome with the latency counted from
// from (the scheduled time, for scheduled requests), and returns the
// answer.
func (l *openLoop) timed(ctx context.Context, op string, from time.Time, k call) answer {
	budget := earlier(time.Now().Add(l.timeout), l.deadline)
	rctx, cancel := context.WithDeadline(ctx, budget)
	l.inFlight.Add(1)
	a := l.client.do(rctx, k)
	l.inFlight.Add(-1)
	cancel()
	end := time.Now()
	outcome := a.outcome()
	if a.err != nil && budget.Equal(l.deadline) && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		outcome = OutcomeCutOff
	}
	l.rec.done(op, outcome, end.Sub(from), end)
	l.rec.sample(outcome, a.err)
	return a
}

// follow runs fn, a customer's next steps after an answer, without holding
// up the scheduled requests. Too many in progress, it records op as skipped
// instead.
func (l *openLoop) follow(op string, fn func()) {
	select {
	case l.followSem <- struct{}{}:
	default:
		now := time.Now()
		l.rec.done(op, OutcomeSkipped, 0, now)
		return
	}
	l.follows.Go(func() {
		defer func() { <-l.followSem }()
		fn()
	})
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// report prints one line a second (offered, answered, by outcome, p99),
// each second of the run once it is over, until ctx ends.
func (l *openLoop) report(ctx context.Context, w io.Writer, label string, streams []stream) {
	if w == nil {
		return
	}
	for sec := 0; ; sec++ {
		sleepUntil(ctx, l.start.Add(time.Duration(sec+1)*time.Second+20*time.Millisecond))
		if ctx.Err() != nil {
			return
		}
		p := l.rec.progressOf(sec)
		fmt.Fprintf(w, "%-12s %3ds  offered %5d/s  answered %5d/s  %s  p99 %s  in flight %d\n",
			label, sec+1, l.scheduledIn(sec, streams), p.answered, outcomeLine(p.outcomes), fmtMS(ms(p.p99)), l.inFlight.Load())
	}
}

// scheduledIn is how many requests the streams schedule in second sec of
// the run (the recorder only counts them once a client picks them up,
// which lags when every client is busy).
func (l *openLoop) scheduledIn(sec int, streams []stream) int64 {
	var n int64
	for _, s := range streams {
		// Request i is due at i/rate: those due in [sec, sec+1) are the
		// indices from ceil(sec·rate) to ceil((sec+1)·rate) − 1.
		first := min(int64(math.Ceil(float64(sec)*s.rate)), l.total(s))
		next := min(int64(math.Ceil(float64(sec+1)*s.rate)), l.total(s))
		n += next - first
	}
	return n
}

// short names for the progress line.
var shortOutcome = map[string]string{
	"409 seat_unavailable": "409seat", "409 sold_out": "409sold", "409 car_unavailable": "409car",
	"429 waiting_room": "429wait", "429 rate_limited": "429rate", "503 overloaded": "503",
	OutcomeTimeout: "timeout", OutcomeTransport: "err", OutcomeUnsent: "unsent", OutcomeCutOff: "cut", OutcomeSkipped: "skipped",
}

func outcomeLine(counts map[string]int) string {
	var names []string
	for o := range counts {
		names = append(names, o)
	}
	sortOutcomes(names)
	parts := make([]string, 0, len(names))
	for _, o := range names {
		n := shortOutcome[o]
		if n == "" {
			n = strings.ReplaceAll(o, " ", ":")
		}
		parts = append(parts, fmt.Sprintf("%s %d", n, counts[o]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " · ")
}

func fmtMS(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2fs", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0fms", v)
	case v >= 10:
		return fmt.Sprintf("%.1fms", v)
	}
	return fmt.Sprintf("%.2fms", v)
}

// closedSpec describes a closed-loop measurement.
type closedSpec struct {
	name, what string
	clients    int
	dur        time.Duration
	// limit bounds the requests (0: no bound besides dur).
	limit int64
	// good is the outcome the measurement counts ("201", "409 sold_out").
	good    string
	timeout time.Duration
}

// runClosed runs spec: each client sends its next request as soon as the
// previous one is answered, until dur has passed or limit requests were
// sent. send performs request i.
func runClosed(ctx context.Context, spec closedSpec, send func(ctx context.Context, i int64) answer) *ClosedResult {
	start := time.Now()
	rec := newRecorder(start)
	end := start.Add(spec.dur)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range spec.clients {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(end) {
				i := next.Add(1) - 1
				if spec.limit > 0 && i >= spec.limit {
					return
				}
				t0 := time.Now()
				rctx, cancel := context.WithTimeout(ctx, spec.timeout)
				a := send(rctx, i)
				cancel()
				t1 := time.Now()
				outcome := a.outcome()
				rec.done(spec.name, outcome, t1.Sub(t0), t1)
				rec.sample(outcome, a.err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	res := &ClosedResult{Name: spec.name, What: spec.what, Clients: spec.clients, Duration: elapsed.Seconds(), GoodOutcome: spec.good}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if t := rec.ops[spec.name]; t != nil {
		op := opResult(spec.name, t, false, elapsed.Seconds(), elapsed.Seconds())
		res.Requests, res.Latency, res.Outcomes, res.counts = op.Answered, op.Latency, op.Outcomes, op.counts
	}
	res.Good = res.counts[spec.good]
	if elapsed > 0 {
		res.PerSec = float64(res.Requests) / elapsed.Seconds()
		res.GoodPerSec = float64(res.Good) / elapsed.Seconds()
	}
	for _, s := range rec.seconds {
		n := 0
		if h := s.outcomes[spec.name+" "+spec.good]; h != nil {
			n = int(h.n)
		}
		res.PerSecond = append(res.PerSecond, n)
	}
	return res
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
