//go:build faults

package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/testsvc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}

// env is what every scenario runs on: one PostgreSQL, one Redis, two berth
// processes behind a client-side "load balancer" (the client picks one and
// moves to the other when a connection fails).
type env struct {
	t     *testing.T
	pg    *testsvc.Postgres
	redis *testsvc.Redis
	dbURL string
	pool  *pgxpool.Pool
	// gw is the fault proxy between berth and the gateway (berth paysim
	// at paysim).
	gw     *faultProxy
	paysim string

	mu    sync.Mutex
	procs [2]*apptest.Process
	urls  [2]string
}

func (e *env) url(i int) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.urls[i]
}

func (e *env) proc(i int) *apptest.Process {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.procs[i]
}

// start (re)starts process i.
func (e *env) start(i int) {
	p := apptest.StartProcess(e.t, e.dbURL, "BERTH_REDIS_URL="+e.redis.URL(), "BERTH_SHED_WAIT=150ms",
		"BERTH_PAYSIM=off", "BERTH_GATEWAY_URL="+e.gw.URL())
	e.mu.Lock()
	e.procs[i], e.urls[i] = p, p.URL
	e.mu.Unlock()
}

// down marks process i unreachable (its address then refuses connections).
func (e *env) down(i int) {
	e.mu.Lock()
	e.urls[i] = "http://127.0.0.1:1"
	e.mu.Unlock()
}

func setup(t *testing.T) *env {
	// Durable: an immediate stop is a crash, and a commit berth answered
	// must survive it.
	pg := testsvc.StartPostgres(t, testsvc.PostgresOptions{Durable: true})
	e := &env{t: t, pg: pg, redis: testsvc.StartRedis(t), dbURL: pg.CreateDatabase(t, "berth")}
	cmd := exec.Command(apptest.Binary(t), "migrate")
	cmd.Env = append(os.Environ(), "BERTH_DATABASE_URL="+e.dbURL)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("berth migrate: %v\n%s", err, out)
	}
	pool, err := pgxpool.New(context.Background(), e.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e.pool = pool
	e.paysim = startPaysim(t)
	e.gw = startProxy(t, strings.TrimPrefix(e.paysim, "http://"))
	e.start(0)
	e.start(1)
	return e
}

// startPaysim runs `berth paysim` as the gateway, a process of its own:
// it decides each charge by itself within 0.5 s (a fifth of them fail) and
// refunds within 0.5 s. It returns its URL.
func startPaysim(t *testing.T) string {
	addr := fmt.Sprintf("127.0.0.1:%d", testsvc.FreePort(t))
	cmd := exec.Command(apptest.Binary(t), "paysim", "-addr", addr, "-auto", "-pay-delay", "500ms",
		"-refund-delay", "500ms", "-fail-share", "0.2")
	cmd.Env = append(os.Environ(), "BERTH_WEBHOOK_SECRET="+apptest.WebhookSecret)
	if err := cmd.Start(); err != nil {
		t.Fatalf("berth paysim: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if err := testsvc.WaitReachable(addr, 30*time.Second); err != nil {
		t.Fatalf("berth paysim: %v", err)
	}
	return "http://" + addr
}

// attempt is one HTTP exchange of an operation.
type attempt struct {
	proc       int
	call, ret  time.Time
	status     int // 0: no answer (the connection failed)
	code       string
	retryAfter bool
	bookingID  int64
	err        string
	replayed   bool
}

// op is one seat hold under one Idempotency-Key, with its retries.
type op struct {
	key      string
	customer int64
	seat     string
	attempts []attempt
}

// final is the op's last answer.
func (o *op) final() attempt { return o.attempts[len(o.attempts)-1] }

// decided reports whether an answer says what happened: a hold (201) or
// the seat was someone else's (409 seat_unavailable).
func decided(a attempt) bool {
	return a.status == http.StatusCreated || (a.status == http.StatusConflict && a.code == "seat_unavailable")
}

type client struct {
	e      *env
	flight int64
	http   *http.Client
	tokMu  sync.Mutex
	tokens map[int64]string
}

func (c *client) token(customer int64) string {
	c.tokMu.Lock()
	defer c.tokMu.Unlock()
	tok, ok := c.tokens[customer]
	if !ok {
		tok = apptest.Token(c.e.t, "customer", customer, time.Now())
		c.tokens[customer] = tok
	}
	return tok
}

// send makes one attempt of o on process proc.
func (c *client) send(ctx context.Context, o *op, proc int) attempt {
	body, _ := json.Marshal(apptest.SeatHold{FlightID: c.flight, FareClass: "ECONOMY", Seats: []string{o.seat}})
	a := attempt{proc: proc, call: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.e.url(proc)+"/bookings", bytes.NewReader(body))
	if err != nil {
		a.err = err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token(o.customer))
	req.Header.Set("Idempotency-Key", o.key)
	resp, err := c.http.Do(req)
	a.ret = time.Now()
	if err != nil {
		a.err = err.Error()
		return a
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a.status = resp.StatusCode
	a.retryAfter = resp.Header.Get("Retry-After") != ""
	a.replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	var doc struct {
		Code      string `json:"code"`
		BookingID int64  `json:"bookingId"`
	}
	_ = json.Unmarshal(b, &doc)
	a.code, a.bookingID = doc.Code, doc.BookingID
	return a
}

// run runs o until an answer decides it or until, as a client would, it
// gives up (some ops stay undecided; resolve learns their outcome).
func (c *client) run(ctx context.Context, o *op, proc int, tries int) {
	for i := range tries {
		a := c.send(ctx, o, proc)
		o.attempts = append(o.attempts, a)
		if decided(a) || ctx.Err() != nil {
			return
		}
		if a.status == 0 {
			proc = 1 - proc // the load balancer takes it elsewhere
		}
		if i < tries-1 {
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// load is an open-loop client: rate holds a second for d, each a random
// seat of the flight for a random customer under a fresh key, whatever
// the answers' speed.
func (c *client) load(ctx context.Context, rate int, d time.Duration, seats []string) []*op {
	var (
		mu  sync.Mutex
		ops []*op
		wg  sync.WaitGroup
	)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.After(d)
	n := 0
loop:
	for {
		select {
		case <-end:
			break loop
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		n++
		o := &op{key: fmt.Sprintf("k-%d-%d", c.flight, n), customer: int64(1 + rand.IntN(500)), seat: seats[rand.IntN(len(seats))]}
		proc := n % 2
		wg.Go(func() {
			c.run(ctx, o, proc, 4)
			mu.Lock()
			ops = append(ops, o)
			mu.Unlock()
		})
	}
	wg.Wait()
	return ops
}

// resolve replays every op under its key until an answer decides it: the
// stored answer (or the one made from the booking its request committed).
func (c *client) resolve(t *testing.T, ops []*op) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, o := range ops {
		if decided(o.final()) {
			continue
		}
		for ctx.Err() == nil {
			a := c.send(ctx, o, rand.IntN(2))
			o.attempts = append(o.attempts, a)
			if decided(a) {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if !decided(o.final()) {
			t.Errorf("key %s never decided: last %+v", o.key, o.final())
		}
	}
}

// report is what a scenario prints.
type report struct {
	name     string
	counts   map[string]int
	recovery time.Duration
	p99      time.Duration
	ops      int
	notes    []string // what the scenario measured besides
}

func (r report) String() string {
	keys := make([]string, 0, len(r.counts))
	for k := range r.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, r.counts[k])
	}
	line := fmt.Sprintf("%-12s ops=%d answers:%s | recovery %s | p99 %s", r.name, r.ops, b.String(),
		r.recovery.Round(time.Millisecond), r.p99.Round(time.Millisecond))
	for _, n := range r.notes {
		line += "\n             " + n
	}
	return line
}

// scenario is one fault: inject runs during the load and returns when the
// fault is over, with the time berth's dependencies were whole again.
type scenario struct {
	name   string
	inject func(t *testing.T, e *env) (restored time.Time)
	// allowed says which failed answers the fault may cause besides
	// decided ones: 503 (with Retry-After), 409 key in use, no answer.
	noAnswer bool // connections may fail (a process died)
	check    func(t *testing.T, e *env, ops []*op)
	// notes, when set, says what the scenario measured besides.
	notes func() []string
}

// TestFaults runs the scenarios one after the other on one environment.
func TestFaults(t *testing.T) {
	e := setup(t)
	// berth answers a hold within 5 s in all (its hold lane's bound, the
	// key's settling included); the client waits 2 s more, so that "no
	// answer" means berth went past its own bound, not that a loaded
	// machine wrote a 503 at 5.01 s.
	c := &client{e: e, http: &http.Client{Timeout: 7 * time.Second}, tokens: map[int64]string{}}
	seats := apptest.Seats(1, 40, "ABCDEF")
	scenarios := []scenario{
		{name: "pg-stop", inject: func(t *testing.T, e *env) time.Time {
			e.pg.Stop(t, "immediate")
			time.Sleep(6 * time.Second)
			e.pg.Start(t)
			return time.Now()
		}},
		{name: "kill-9", noAnswer: true, inject: func(t *testing.T, e *env) time.Time {
			_ = e.proc(0).Stop(syscall.SIGKILL, 10*time.Second)
			e.down(0)
			time.Sleep(2 * time.Second)
			e.start(0)
			return time.Now()
		}, check: func(t *testing.T, e *env, ops []*op) {
			for _, o := range ops {
				for _, a := range o.attempts {
					if a.status == 0 && a.proc != 0 {
						t.Errorf("a client of the surviving process saw an error: %+v", a)
					}
				}
			}
		}},
		{name: "sigterm", noAnswer: true, inject: func(t *testing.T, e *env) time.Time {
			if err := e.proc(1).Stop(syscall.SIGTERM, 30*time.Second); err != nil {
				t.Errorf("berth serve after SIGTERM: %v, want exit 0", err)
			}
			e.down(1)
			e.start(1)
			return time.Now()
		}, check: func(t *testing.T, e *env, ops []*op) {
			for _, o := range ops {
				for _, a := range o.attempts {
					if strings.Contains(a.err, "reset") || strings.Contains(a.err, "EOF") {
						t.Errorf("a connection was cut during the drain: %+v", a)
					}
				}
			}
		}},
		{name: "redis-kill", inject: func(t *testing.T, e *env) time.Time {
			e.redis.Kill(t)
			for i := range 2 {
				r := apptest.Do(t, e.url(i), apptest.Request{Method: http.MethodGet, Path: "/readyz"})
				if r.Status != http.StatusOK {
					t.Errorf("readyz of process %d without Redis: %d %s, want 200", i, r.Status, r.Body)
				}
			}
			time.Sleep(4 * time.Second)
			e.redis.Start(t)
			return time.Now()
		}},
		{name: "pause", noAnswer: true, inject: func(t *testing.T, e *env) time.Time {
			for range 5 {
				_ = e.proc(0).Signal(syscall.SIGSTOP)
				time.Sleep(700 * time.Millisecond)
				_ = e.proc(0).Signal(syscall.SIGCONT)
				time.Sleep(500 * time.Millisecond)
			}
			return time.Now()
		}},
		exhaustion(c),
		gatewayFaults(c),
	}
	var reports []report
	for _, sc := range scenarios {
		ok := t.Run(sc.name, func(t *testing.T) {
			c.flight = apptest.CreateFlight(t, e.url(0), apptest.Token(t, "admin", 1, time.Now()), time.Now().Add(72*time.Hour),
				apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: seats})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			restored := make(chan time.Time, 1)
			go func() {
				time.Sleep(3 * time.Second)
				restored <- sc.inject(t, e)
			}()
			ops := c.load(ctx, 60, 16*time.Second, seats)
			at := <-restored
			c.resolve(t, ops)
			r := check(t, e, sc, c.flight, ops, at)
			if sc.notes != nil {
				r.notes = sc.notes()
			}
			reports = append(reports, r)
			t.Log(r)
		})
		if !ok {
			break
		}
	}
	for _, r := range reports {
		fmt.Println(r)
	}
}

// check holds what the clients saw against the database and returns the
// scenario's report.
func check(t *testing.T, e *env, sc scenario, flight int64, ops []*op, restored time.Time) report {
	r := report{name: sc.name, counts: map[string]int{}, ops: len(ops)}
	var lat []time.Duration
	ids := map[int64]*op{}
	recovered := time.Time{}
	for _, o := range ops {
		var first int64
		for _, a := range o.attempts {
			label := fmt.Sprint(a.status)
			switch {
			case a.status == 0:
				label = "no-answer"
			case a.code != "":
				label += " " + a.code
			}
			r.counts[label]++
			if a.status != 0 {
				lat = append(lat, a.ret.Sub(a.call))
			}
			switch {
			case a.status >= 500 && a.status != http.StatusServiceUnavailable:
				t.Errorf("key %s: %d %s, never a 5xx other than 503", o.key, a.status, a.code)
			case a.status == http.StatusServiceUnavailable && (a.code != "overloaded" || !a.retryAfter):
				t.Errorf("key %s: 503 %s without Retry-After", o.key, a.code)
			case a.status == 0 && !sc.noAnswer:
				t.Errorf("key %s: no answer (%s) where a process stayed up", o.key, a.err)
			}
			if decided(a) && a.call.After(restored) && (recovered.IsZero() || a.ret.Before(recovered)) {
				recovered = a.ret
			}
			if a.status != http.StatusCreated {
				continue
			}
			if first == 0 {
				first = a.bookingID
			} else if a.bookingID != first {
				t.Errorf("key %s answered two bookings, %d and %d: a duplicate effect", o.key, first, a.bookingID)
			}
		}
		if first != 0 {
			if prev, dup := ids[first]; dup {
				t.Errorf("booking %d answered to keys %s and %s", first, prev.key, o.key)
			}
			ids[first] = o
		}
	}
	if !recovered.IsZero() {
		r.recovery = recovered.Sub(restored)
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		r.p99 = lat[len(lat)*99/100]
	}

	// Every 201 is a booking of that customer holding that seat, and every
	// booking of the flight was answered to a key: nothing made twice.
	ctx := context.Background()
	rows, err := e.pool.Query(ctx, `SELECT b.id, b.customer_id, coalesce(s.seat_no, '') FROM booking b
		LEFT JOIN seat s ON s.booking_id = b.id AND s.flight_id = b.flight_id WHERE b.flight_id = $1`, flight)
	if err != nil {
		t.Fatal(err)
	}
	inDB := map[int64]bool{}
	for rows.Next() {
		var (
			id, customer int64
			seat         string
		)
		if err := rows.Scan(&id, &customer, &seat); err != nil {
			t.Fatal(err)
		}
		inDB[id] = true
		o, ok := ids[id]
		switch {
		case !ok:
			t.Errorf("booking %d (customer %d, seat %s) was answered to no client: an effect nobody asked for", id, customer, seat)
		case o.customer != customer || o.seat != seat:
			t.Errorf("booking %d is customer %d seat %s, the client was told customer %d seat %s", id, customer, seat, o.customer, o.seat)
		}
	}
	rows.Close()
	for id, o := range ids {
		if !inDB[id] {
			t.Errorf("key %s was answered 201 booking %d, which does not exist", o.key, id)
		}
	}
	linearizable(t, ops)
	audit(t, e)
	if sc.check != nil {
		sc.check(t, e, ops)
	}
	return r
}

// seatInput and seatOutput are a hold of one seat under a key, and whether
// it got the seat.
type seatInput struct{ seat, key string }
type seatOutput struct{ held bool }

// linearizable checks the seat holds with Porcupine: per seat, a register
// that the first hold takes; a repeat of the same key finds it its own.
// 409s are in the history but always legal (see Step).
func linearizable(t *testing.T, ops []*op) {
	var history []porcupine.Operation
	for i, o := range ops {
		// The op took effect between its first call and its deciding answer.
		last := o.final()
		if !decided(last) {
			continue
		}
		history = append(history, porcupine.Operation{ClientId: i, Input: seatInput{o.seat, o.key},
			Call: o.attempts[0].call.UnixNano(), Output: seatOutput{last.status == http.StatusCreated}, Return: last.ret.UnixNano()})
	}
	model := porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			for _, op := range h {
				s := op.Input.(seatInput).seat
				by[s] = append(by[s], op)
			}
			var out [][]porcupine.Operation
			for _, p := range by {
				out = append(out, p)
			}
			return out
		},
		Init: func() any { return "" },
		Step: func(state, input, output any) (bool, any) {
			holder, in, out := state.(string), input.(seatInput), output.(seatOutput)
			if out.held {
				return holder == "" || holder == in.key, in.key
			}
			// A 409 is no evidence of a holder: the Redis seat gate turns a
			// buyer away while another's hold of the seat is in flight, and
			// that hold may then fail (the database went away). The seat
			// is only never given to two keys.
			return true, holder
		},
	}
	if res := porcupine.CheckOperationsTimeout(model, history, 30*time.Second); res != porcupine.Ok {
		t.Errorf("seat holds are not linearizable (%s) over %d operations", res, len(history))
	}
}

// audit runs `berth audit` until it is clean (events may still be on their
// way right after the load) or fails.
func audit(t *testing.T, e *env) {
	var out []byte
	for range 10 {
		cmd := exec.Command(apptest.Binary(t), "audit")
		cmd.Env = append(os.Environ(), "BERTH_DATABASE_URL="+e.dbURL)
		var err error
		if out, err = cmd.CombinedOutput(); err == nil {
			return
		}
		time.Sleep(2 * time.Second)
	}
	t.Errorf("berth audit:\n%s", out)
}
