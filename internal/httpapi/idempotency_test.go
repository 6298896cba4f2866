package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/base"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/guard"
	"berth.dev/berth/internal/idempotency"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// keyBundle is a server with one idempotent test route, POST /t, whose
// handler the test scripts.
type keyBundle struct {
	srv   *Server
	keys  *idempotency.Store
	url   string
	clock *clock.Fake
	runs  atomic.Int64
	// errors counts the server's ERROR log lines.
	errors atomic.Int64
	// answer decides the handler's answer for run n (1-based).
	answer func(n int64, w http.ResponseWriter, r *http.Request) error
}

var testSecret = []byte("idempotency-test-secret-0123")

// errorCounter is a slog handler that counts ERROR records and drops the rest.
type errorCounter struct{ n *atomic.Int64 }

func (h errorCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (h errorCounter) Handle(context.Context, slog.Record) error    { h.n.Add(1); return nil }
func (h errorCounter) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h errorCounter) WithGroup(string) slog.Handler                { return h }

// setupKeys sets up a keyBundle whose route claims its key before its
// handler runs (runClaimed), or, pending, after (runPending: as if the
// handler's effect claimed it; the scripted handler makes none).
func setupKeys(t *testing.T, pending bool) *keyBundle {
	t.Helper()
	b := &keyBundle{clock: clock.NewFake(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))}
	pool := pgtest.NewPool(t)
	b.keys = idempotency.New(base.Test(b.clock), pool)
	b.srv = New(Deps{Log: slog.New(errorCounter{&b.errors}), Clock: b.clock, Pool: pool, Keys: b.keys,
		AuthSecret: testSecret, Registry: prometheus.NewRegistry()})
	e := route("POST /t", roles(auth.Customer), guard.LaneOther, KeyOptional, func(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
		n := b.runs.Add(1)
		if _, err := io.ReadAll(r.Body); err != nil {
			return err
		}
		return b.answer(n, w, r)
	})
	if pending {
		e = e.claimsKeyInHold()
	}
	b.srv.handle(e)
	hs := httptest.NewServer(b.srv)
	t.Cleanup(hs.Close)
	b.url = hs.URL
	return b
}

// bothWays runs test with a route that claims its key before running, and
// with one whose effect claims it (pending).
func bothWays(t *testing.T, test func(t *testing.T, pending bool)) {
	for _, pending := range []bool{false, true} {
		t.Run(map[bool]string{false: "claimed", true: "pending"}[pending], func(t *testing.T) {
			t.Parallel()
			test(t, pending)
		})
	}
}

// answer is a response, fully read.
type answer struct {
	StatusCode int
	Header     http.Header
}

func (b *keyBundle) post(t *testing.T, sub int64, key, body string) (answer, string) {
	t.Helper()
	tok, err := auth.Issue(testSecret, sub, auth.Customer, b.clock.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, b.url+"/t", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{StatusCode: resp.StatusCode, Header: resp.Header}, string(out)
}

func created(n int64, w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Location", fmt.Sprintf("/things/%d", n))
	writeJSON(w, http.StatusCreated, map[string]int64{"run": n})
	return nil
}

// Answers that are not final — a 5xx, a 429 — are not stored: the retry
// with the same key runs again. The final one is then stored and replayed.
func TestKeyNotFinalAnswersAreNotStored(t *testing.T) {
	t.Parallel()
	bothWays(t, keyNotFinalAnswersAreNotStored)
}

func keyNotFinalAnswersAreNotStored(t *testing.T, pending bool) {
	b := setupKeys(t, pending)
	b.answer = func(n int64, w http.ResponseWriter, r *http.Request) error {
		switch n {
		case 1:
			return errors.New("database on fire") // 500
		case 2:
			return &fault.Error{Code: fault.RateLimited, Detail: "slow down", RetryAfter: time.Second}
		case 3:
			return fault.New(fault.Overloaded, "shed") // 503
		}
		return created(n, w, r)
	}
	for i, want := range []int{500, 429, 503, 201, 201} {
		resp, body := b.post(t, 1, "k", `{"a":1}`)
		if resp.StatusCode != want {
			t.Fatalf("call %d: %d %s, want %d", i+1, resp.StatusCode, body, want)
		}
		if i == 4 && (!strings.Contains(body, `"run":4`) || resp.Header.Get("Location") != "/things/4" ||
			resp.Header.Get("Idempotent-Replayed") != "true") {
			t.Errorf("replay: %s, Location %q, replayed %q; want run 4's answer", body, resp.Header.Get("Location"),
				resp.Header.Get("Idempotent-Replayed"))
		}
	}
	// Pending, the handler runs for the replay too: a real hold would have
	// found its key claimed, and made nothing.
	if n, want := b.runs.Load(), map[bool]int64{false: 4, true: 5}[pending]; n != want {
		t.Errorf("handler ran %d times, want %d", n, want)
	}
}

// A request refused as it was written (400, 422) did nothing: it is not
// kept to its key, so the client sends it again, corrected, under the same
// key, and that one is the key's. A different body after it is refused.
func TestKeyRefusedRequestIsNotKept(t *testing.T) {
	t.Parallel()
	bothWays(t, keyRefusedRequestIsNotKept)
}

func keyRefusedRequestIsNotKept(t *testing.T, pending bool) {
	b := setupKeys(t, pending)
	b.answer = func(n int64, w http.ResponseWriter, r *http.Request) error {
		switch n {
		case 1:
			return fault.New(fault.InvalidRequest, "the body is not JSON")
		case 2:
			return fault.Invalid("car", "must be a car id")
		}
		return created(n, w, r)
	}
	for i, c := range []struct {
		body string
		want int
	}{{`{"car":`, 400}, {`{"car":0}`, 422}, {`{"car":4}`, 201}, {`{"car":4}`, 201}, {`{"car":0}`, 422}, {`{"car":5}`, 422}} {
		resp, body := b.post(t, 1, "k", c.body)
		if resp.StatusCode != c.want {
			t.Fatalf("call %d (%s): %d %s, want %d", i+1, c.body, resp.StatusCode, body, c.want)
		}
		if i == 3 && (!strings.Contains(body, `"run":3`) || resp.Header.Get("Idempotent-Replayed") != "true") {
			t.Errorf("repeat of the request that ran: %s, replayed %q; want run 3's answer", body, resp.Header.Get("Idempotent-Replayed"))
		}
		if i >= 4 && !strings.Contains(body, "idempotency_key_reused") {
			t.Errorf("call %d (%s) after the key's request: %s, want idempotency_key_reused", i+1, c.body, body)
		}
	}
}

// A final error (4xx) is the answer, stored and replayed like a success.
func TestKeyFinalErrorIsReplayed(t *testing.T) {
	t.Parallel()
	bothWays(t, keyFinalErrorIsReplayed)
}

func keyFinalErrorIsReplayed(t *testing.T, pending bool) {
	b := setupKeys(t, pending)
	b.answer = func(n int64, w http.ResponseWriter, r *http.Request) error {
		if n == 1 {
			return fault.New(fault.SeatUnavailable, "taken")
		}
		return created(n, w, r)
	}
	for range 2 {
		resp, body := b.post(t, 1, "k", `{}`)
		if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "seat_unavailable") ||
			resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%d %s (%s), want the 409 seat_unavailable replayed", resp.StatusCode, body, resp.Header.Get("Content-Type"))
		}
	}
	if n, want := b.runs.Load(), map[bool]int64{false: 1, true: 2}[pending]; n != want {
		t.Errorf("handler ran %d times, want %d", n, want)
	}
}

// While the first request runs, repeats get 409 in use — however many
// arrive at once, none gets a 500 from the unique index — and afterwards
// the first answer.
//
// Claimed before the handler runs only: a route whose effect claims the key
// lets repeats run until that effect, where one wins (TestIdempotentHoldConcurrent).
func TestKeyInUseWhileRunning(t *testing.T) {
	t.Parallel()
	b := setupKeys(t, false)
	release, arrived := make(chan struct{}), make(chan struct{})
	b.answer = func(n int64, w http.ResponseWriter, r *http.Request) error {
		close(arrived)
		<-release
		return created(n, w, r)
	}
	first := make(chan string, 1)
	go func() {
		resp, body := b.post(t, 1, "k", `{}`)
		first <- fmt.Sprint(resp.StatusCode, body)
	}()
	<-arrived
	var wg sync.WaitGroup
	codes := make([]string, 10)
	for i := range codes {
		wg.Go(func() {
			resp, body := b.post(t, 1, "k", `{}`)
			codes[i] = fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("Retry-After"), " ", strings.Contains(body, "idempotency_key_in_use"))
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != "409 1 true" {
			t.Errorf("repeat %d while running: %s, want 409 in use with Retry-After 1", i, c)
		}
	}
	close(release)
	want := <-first
	resp, body := b.post(t, 1, "k", `{}`)
	if got := fmt.Sprint(resp.StatusCode, body); got != want {
		t.Errorf("after: %s, want %s", got, want)
	}
	if n := b.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// A request whose process died holds its key only until its lease ends;
// then the same request takes over, and a different one is still refused.
// Keys end after 24 hours.
func TestKeyLeaseAndExpiry(t *testing.T) {
	t.Parallel()
	bothWays(t, keyLeaseAndExpiry)
}

func keyLeaseAndExpiry(t *testing.T, pending bool) {
	b := setupKeys(t, pending)
	b.answer = created
	// What a crashed owner leaves behind: a row without an answer.
	q := idempotency.NewRequest(1, "crashed", http.MethodPost, "/t", []byte(`{}`))
	lease, _, err := b.keys.Claim(context.Background(), q, nil)
	if err != nil || lease == "" {
		t.Fatalf("claim: %q %v", lease, err)
	}
	if resp, _ := b.post(t, 1, "crashed", `{}`); resp.StatusCode != http.StatusConflict {
		t.Errorf("during the lease: %d, want 409", resp.StatusCode)
	}
	b.clock.Advance(idempotency.Lease)
	if resp, _ := b.post(t, 1, "crashed", `{"other":1}`); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("another request after the lease: %d, want 422", resp.StatusCode)
	}
	if resp, _ := b.post(t, 1, "crashed", `{}`); resp.StatusCode != http.StatusCreated {
		t.Errorf("the same request after the lease: %d, want 201", resp.StatusCode)
	}
	// The late owner's answer must not overwrite the new owner's.
	b.keys.Settle(q, lease, &idempotency.Answer{Status: 500}, time.Time{})
	if resp, body := b.post(t, 1, "crashed", `{}`); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay after a stale owner settled: %d %s", resp.StatusCode, body)
	}

	b.clock.Advance(idempotency.TTL)
	resp, body := b.post(t, 1, "crashed", `{"new":"body"}`)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("after 24h with another body: %d %s, want a fresh 201", resp.StatusCode, body)
	}
	n, err := b.keys.Purge(context.Background(), 100)
	if err != nil || n != 0 {
		t.Errorf("purge of live keys: %d %v, want 0", n, err)
	}
	b.clock.Advance(idempotency.TTL)
	if n, err := b.keys.Purge(context.Background(), 100); err != nil || n != 1 {
		t.Errorf("purge after 24h: %d %v, want 1", n, err)
	}
}

// Malformed keys are refused before anything runs.
func TestKeyFormat(t *testing.T) {
	t.Parallel()
	bothWays(t, keyFormat)
}

func keyFormat(t *testing.T, pending bool) {
	b := setupKeys(t, pending)
	b.answer = created
	for _, key := range []string{strings.Repeat("k", 256), "tab\there", "ünïcode"} {
		resp, body := b.post(t, 1, key, `{}`)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "invalid_request") {
			t.Errorf("key %q: %d %s, want 400 invalid_request", key, resp.StatusCode, body)
		}
	}
	if resp, _ := b.post(t, 1, strings.Repeat("k", 255), `{}`); resp.StatusCode != http.StatusCreated {
		t.Errorf("255-character key: %d, want 201", resp.StatusCode)
	}
	if n := b.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want only for the valid key", n)
	}
}

// The request that owns a key keeps running if its client goes away, but
// never past the request's own deadline (the lane's bound in all, set by
// the guard before the key is claimed): a hold stuck on a stalled database
// is cut there and answered 503, as one without a key would be.
func TestKeyedRequestKeepsItsDeadline(t *testing.T) {
	t.Parallel()
	bothWays(t, keyedRequestKeepsItsDeadline)
}

func keyedRequestKeepsItsDeadline(t *testing.T, pending bool) {
	b := setupKeys(t, pending)
	var seen atomic.Value
	h := b.srv.idempotent(KeyOptional, pending, 0, func(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
		d, _ := r.Context().Deadline()
		seen.Store(d)
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	by := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), by)
	defer cancel()
	for _, key := range []string{"", "keyed-1"} {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/t", strings.NewReader("{}"))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		if err := h(rec, req, auth.Caller{ID: 9, Role: auth.Customer}); err != nil {
			t.Fatal(err)
		}
		if rec.Code != http.StatusNoContent {
			t.Fatalf("key %q: status %d", key, rec.Code)
		}
		if d, _ := seen.Load().(time.Time); !d.Equal(by) {
			t.Errorf("key %q: the handler's deadline is %v, want the request's %v", key, d, by)
		}
	}
}

// A route whose effect claims its key runs a repeat before it knows the key
// is answered. Whatever the repeat's handler then says, other than a 503,
// the stored answer is what the client gets: a refusal the repeat met
// before the database (a spent admission's 429, a 409 from the seat gate
// its own first hold set) is not the request's answer. A 503 is answered
// as it is: shedding costs the database nothing, and the retry gets the
// answer later. A handler whose hold found the key claimed
// (pg.ErrKeyClaimed) made nothing: a new key is then claimed first and the
// handler run again.
func TestPendingKeyRepeatGetsTheStoredAnswer(t *testing.T) {
	t.Parallel()
	b := setupKeys(t, true)
	var script sync.Map // run → its answer
	b.answer = func(n int64, w http.ResponseWriter, r *http.Request) error {
		if f, ok := script.Load(n); ok {
			return f.(func() error)()
		}
		return created(n, w, r)
	}
	say := func(n int64, err error) { script.Store(n, func() error { return err }) }
	post := func(key string, want int, replayed bool, what string) {
		t.Helper()
		resp, body := b.post(t, 1, key, `{}`)
		if resp.StatusCode != want || (resp.Header.Get("Idempotent-Replayed") == "true") != replayed {
			t.Errorf("%s: %d %s (replayed %q), want %d replayed %v", what, resp.StatusCode, body,
				resp.Header.Get("Idempotent-Replayed"), want, replayed)
		}
	}
	post("a", http.StatusCreated, false, "the first request")
	say(2, &fault.Error{Code: fault.WaitingRoom, Detail: "admission spent", RetryAfter: time.Second})
	post("a", http.StatusCreated, true, "a repeat refused with 429 before the database")
	say(3, fault.New(fault.SeatUnavailable, "held by its own first hold"))
	post("a", http.StatusCreated, true, "a repeat refused with 409 before the database")
	say(4, fault.New(fault.Overloaded, "shed"))
	post("a", http.StatusServiceUnavailable, false, "a repeat shed")
	say(5, pg.ErrKeyClaimed)
	post("a", http.StatusCreated, true, "a repeat whose hold found the key claimed")
	if n := b.runs.Load(); n != 5 {
		t.Errorf("handler ran %d times, want 5", n)
	}

	// A new key: a 429 before the database is the answer, and stores
	// nothing; a hold that found the key claimed (by a request since gone)
	// is run again under the claimed key.
	say(6, &fault.Error{Code: fault.RateLimited, Detail: "slow down", RetryAfter: time.Second})
	post("b", http.StatusTooManyRequests, false, "a new key's 429")
	say(7, pg.ErrKeyClaimed)
	post("b", http.StatusCreated, false, "a new key whose hold found it claimed")
	if n := b.runs.Load(); n != 8 {
		t.Errorf("handler ran %d times, want 8 (run 7 again as run 8)", n)
	}
	post("b", http.StatusCreated, true, "its repeat")
	// A key found claimed is handled, not an internal error.
	if n := b.errors.Load(); n != 0 {
		t.Errorf("%d ERROR log lines, want none", n)
	}
}
