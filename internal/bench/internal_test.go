package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/internal/audit"
	"berth.dev/berth/internal/auth"
)

func TestHistQuantilesWithinOnePercent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h hist
	var all []time.Duration
	for range 20_000 {
		// Latencies spread over five orders of magnitude, like a run
		// that has both cached rejections and a queue.
		d := time.Duration(float64(time.Microsecond) * float64(int(1)<<rng.IntN(24)) * (1 + rng.Float64()))
		h.add(d)
		all = append(all, d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := all[int(q*float64(len(all))+0.5)-1]
		got := h.quantile(q)
		if diff := float64(got-exact) / float64(exact); diff > 0.01 || diff < -0.01 {
			t.Errorf("p%g = %s, exact %s (%.2f %% off)", q*100, got, exact, diff*100)
		}
	}
	if got := h.quantile(1); got != all[len(all)-1].Truncate(time.Microsecond) {
		t.Errorf("max = %s, want %s", got, all[len(all)-1])
	}
	var empty hist
	if empty.quantile(0.99) != 0 || empty.percentiles() != (Percentiles{}) {
		t.Errorf("empty histogram has percentiles %+v", empty.percentiles())
	}
	var merged hist
	merged.merge(&h)
	merged.merge(&empty)
	if merged.n != h.n || merged.quantile(0.99) != h.quantile(0.99) {
		t.Errorf("merge changed the distribution: n %d vs %d", merged.n, h.n)
	}
}

func TestHistBucketsAreContiguous(t *testing.T) {
	prev := -1
	for us := int64(0); us < 1<<20; us++ {
		b := bucketOf(us)
		if b != prev && b != prev+1 {
			t.Fatalf("bucketOf(%d) = %d after %d", us, b, prev)
		}
		if mid := midOf(b); float64(mid-us) > 0.01*float64(us)+1 || float64(us-mid) > 0.01*float64(us)+1 {
			t.Fatalf("bucket %d of %d µs has middle %d µs", b, us, mid)
		}
		prev = b
	}
}

func TestOutcomeOf(t *testing.T) {
	timeoutErr := &net.OpError{Op: "read", Err: timeoutError{}}
	for _, tc := range []struct {
		status int
		code   string
		err    error
		want   string
	}{
		{201, "", nil, "201"},
		{200, "", nil, "200"},
		{409, "sold_out", nil, "409 sold_out"},
		{429, "waiting_room", nil, "429 waiting_room"},
		{503, "overloaded", nil, "503 overloaded"},
		{500, "internal", nil, "500 internal"},
		{502, "", nil, "502"},
		{0, "", context.DeadlineExceeded, OutcomeTimeout},
		{0, "", fmt.Errorf("post: %w", context.DeadlineExceeded), OutcomeTimeout},
		{0, "", timeoutErr, OutcomeTimeout},
		{0, "", errors.New("connection reset by peer"), OutcomeTransport},
	} {
		if got := outcomeOf(tc.status, tc.code, tc.err); got != tc.want {
			t.Errorf("outcomeOf(%d, %q, %v) = %q, want %q", tc.status, tc.code, tc.err, got, tc.want)
		}
	}
	for o, want := range map[string]bool{"500 internal": true, "502": true, "503 overloaded": false, "503": true, "409 sold_out": false, OutcomeTimeout: false} {
		if isServerError(o) != want {
			t.Errorf("isServerError(%q) = %v", o, !want)
		}
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// TestOpenLoopGivesEveryRequestOneOutcome drives the open loop at a server
// that never answers some requests and is slower than the offered rate, with
// few clients: requests time out, some are never sent, and still each
// scheduled request ends exactly once.
func TestOpenLoopGivesEveryRequestOneOutcome(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.URL.Query().Get("i"))
		switch {
		case i%7 == 0: // never answers: the client's budget runs out
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		case i%3 == 0:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"code":"sold_out"}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"bookingId": 1}`)
	}))
	defer srv.Close()
	defer close(release)

	c := newClient(4)
	defer c.close()
	const rate, total = 400, 200
	l := newOpenLoop(c, time.Now(), total*time.Second/rate, 100*time.Millisecond, 150*time.Millisecond, 8)
	sent := make([]atomic.Int32, total)
	l.run(context.Background(), []stream{{op: "hold", rate: rate, conns: 3, send: func(ctx context.Context, i int64, sched time.Time) {
		sent[i].Add(1)
		l.timed(ctx, "hold", sched, call{method: http.MethodPost, url: fmt.Sprintf("%s/?i=%d", srv.URL, i), body: []byte(`{}`)})
	}}})

	res := openResult(l.rec, []string{"hold"}, l.end.Sub(l.start))
	op := res.Op("hold")
	if op.Offered != total || op.Answered != total || res.Offered != total || res.Answered != total {
		t.Fatalf("offered %d answered %d (totals %d/%d), want %d", op.Offered, op.Answered, res.Offered, res.Answered, total)
	}
	sentOnce := 0
	for i := range sent {
		switch sent[i].Load() {
		case 0:
		case 1:
			sentOnce++
		default:
			t.Errorf("request %d sent %d times", i, sent[i].Load())
		}
	}
	if got := op.Count(OutcomeUnsent); sentOnce+got != total {
		t.Errorf("%d sent + %d unsent != %d", sentOnce, got, total)
	}
	if op.Count(OutcomeTimeout)+op.Count(OutcomeCutOff) == 0 || op.Count("201") == 0 || op.Count("409 sold_out") == 0 {
		t.Errorf("outcomes %+v: want timeouts, 201s and 409 sold_out", op.Outcomes)
	}
	perSecond := 0
	for _, s := range res.Series {
		for _, st := range s.Outcomes {
			perSecond += st.Count
		}
	}
	if perSecond != total {
		t.Errorf("series count %d answers, want %d", perSecond, total)
	}
}

func TestVerdict(t *testing.T) {
	ok := AuditResult{Ran: true, OK: true}
	for _, tc := range []struct {
		name     string
		mode     Mode
		failures int
	}{
		{"clean", Mode{Audit: ok, Open: &OpenResult{Ops: []*OpStat{{Op: "hold", Outcomes: []OutcomeStat{{Outcome: "201"}, {Outcome: "503 overloaded"}, {Outcome: OutcomeTimeout}}}}}}, 0},
		{"500 in the open loop", Mode{Audit: ok, Open: &OpenResult{Ops: []*OpStat{{Op: "hold", Outcomes: []OutcomeStat{{Outcome: "500 internal", Count: 2}}}}}}, 1},
		{"502 in a closed loop", Mode{Audit: ok, Closed: []*ClosedResult{{Name: HotFlight, Outcomes: []OutcomeStat{{Outcome: "502", Count: 1}}}}}, 1},
		{"audit did not run", Mode{Audit: AuditResult{Error: "connection refused"}}, 1},
		{"violations", Mode{Audit: AuditResult{Ran: true, Results: []audit.Result{
			{ID: "I1", OK: false, Count: 2, Violations: []string{"seat 1/12A"}}, {ID: "I2", OK: true},
		}}}, 1},
	} {
		if got := tc.mode.verdict(); len(got) != tc.failures {
			t.Errorf("%s: verdict %q, want %d failures", tc.name, got, tc.failures)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	good := Defaults()
	good.DatabaseURL = "postgres://localhost/x"
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	q := Quick()
	q.DatabaseURL = good.DatabaseURL
	if err := q.Validate(); err != nil {
		t.Fatalf("quick: %v", err)
	}
	for _, tc := range []struct {
		flag   string
		change func(*Options)
	}{
		{"--scenario", func(o *Options) { o.Scenario = "black-friday" }},
		{"--protect", func(o *Options) { o.Protect = "maybe" }},
		{"--database-url", func(o *Options) { o.DatabaseURL = "" }},
		{"--rate", func(o *Options) { o.Rate = 0 }},
		{"--duration", func(o *Options) { o.Duration = time.Millisecond }},
		{"--flights", func(o *Options) { o.Flights = 0 }},
		{"--pay-share", func(o *Options) { o.PayShare = 1.5 }},
		{"--zipf", func(o *Options) { o.Zipf = 1 }},
		{"--hot-clients", func(o *Options) { o.HotClients = 0 }},
		{"--timeout", func(o *Options) { o.Timeout = 0 }},
		{"--waiting-room", func(o *Options) { o.WaitingRoom = -1 }},
		{"--processes", func(o *Options) { o.Processes = nil }},
		{"--processes", func(o *Options) { o.Processes = []int{0} }},
		{"--redis-url", func(o *Options) { o.Processes = []int{1, 2}; o.RedisURL = "" }},
		{"--hot-clients-more", func(o *Options) { o.HotClientsMore = -1 }},
		{"--uncached-search-rate", func(o *Options) { o.UncachedSearchRate = -1 }},
	} {
		o := good
		tc.change(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s: Validate() = %v, want an error naming it", tc.flag, err)
		}
	}
}

var seatRe = regexp.MustCompile(`^([0-9]{1,3})([A-Z])$`)

func TestSaleHoldsAreValidRequests(t *testing.T) {
	flights := []int64{11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	pop := newPopularity(len(flights), 1.1)
	picked := map[int64]int{}
	seatHolds, quantityHolds := 0, 0
	for i := range 5000 {
		rng := rand.New(rand.NewPCG(1, uint64(i)))
		b := saleHold(rng, flights, pop, 0.7)
		picked[b.FlightID]++
		var cc cabinClass
		for _, c := range cabin {
			if c.class == b.FareClass {
				cc = c
			}
		}
		if cc.class == "" {
			t.Fatalf("unknown class %q", b.FareClass)
		}
		if b.Seats == nil {
			quantityHolds++
			if b.Quantity < 1 || b.Quantity > 2 {
				t.Errorf("quantity %d", b.Quantity)
			}
			continue
		}
		seatHolds++
		if len(b.Seats) < 1 || len(b.Seats) > 3 || b.Quantity != 0 {
			t.Fatalf("hold %+v", b)
		}
		row := ""
		for k, s := range b.Seats {
			m := seatRe.FindStringSubmatch(s)
			if m == nil {
				t.Fatalf("seat %q", s)
			}
			r, _ := strconv.Atoi(m[1])
			if r < cc.firstRow || r > cc.lastRow || (row != "" && m[1] != row) {
				t.Fatalf("seats %v not in one row of %s", b.Seats, cc.class)
			}
			row = m[1]
			if k > 0 && s[len(s)-1] != b.Seats[k-1][len(b.Seats[k-1])-1]+1 {
				t.Fatalf("seats %v not adjacent", b.Seats)
			}
		}
	}
	if seatHolds < 3000 || quantityHolds < 1000 {
		t.Errorf("%d seat holds and %d quantity holds of 5000, want about 70/30", seatHolds, quantityHolds)
	}
	if picked[11] < 3*picked[20] {
		t.Errorf("popularity not skewed: first flight %d, last %d", picked[11], picked[20])
	}
}

func TestHotPairsAreDistinctSeats(t *testing.T) {
	flights := []int64{7, 8, 9}
	seen := map[string]bool{}
	for i := range int64(len(flights) * hotPairsPerPlane) {
		f, seats := hotPair(flights, i)
		if want := flights[i/int64(hotPairsPerPlane)]; f != want {
			t.Fatalf("pair %d on flight %d, want %d", i, f, want)
		}
		for _, s := range seats {
			key := fmt.Sprint(f, "/", s)
			if seen[key] || !seatRe.MatchString(s) {
				t.Fatalf("pair %d: seat %s repeated or malformed", i, key)
			}
			seen[key] = true
		}
	}
	if len(seen) != len(flights)*hotFlightRows*len(hotFlightLetters) {
		t.Errorf("%d seats, want every seat of the hot flights", len(seen))
	}
	if n := hotFlightCount(5 * time.Second); n*hotPairsPerPlane < 5*hotPlanRate {
		t.Errorf("%d hot flights hold %d pairs, fewer than 5 s at %d/s", n, n*hotPairsPerPlane, hotPlanRate)
	}
}

// A token book gives customer first+i the token of customer first+i, from
// the book or, past its end, signed then.
func TestTokenBookSignsEachCustomersOwnToken(t *testing.T) {
	srv := &server{secret: []byte("0123456789abcdef-bench-secret")}
	b := srv.tokenBook(1_000, 5)
	for _, i := range []int64{0, 3, 4, 5, 70} {
		c, err := auth.Verify(srv.secret, b.of(i), time.Now())
		if err != nil || c.ID != 1_000+i || c.Role != auth.Customer {
			t.Errorf("token %d: %+v, %v; want customer %d", i, c, err, 1_000+i)
		}
	}
	if n := len(srv.tokenBook(1, maxTokenBook+10).toks); n != maxTokenBook {
		t.Errorf("a book of maxTokenBook+10 holds %d tokens, want %d", n, maxTokenBook)
	}
}
