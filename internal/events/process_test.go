package events_test

import (
	"bufio"
	"context"
	"crypto/hmac"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/events"
)

const hookSecret = "whsec_dGVzdC1ob29rLXNlY3JldC0wMTIzNDU2Nzg5" // "test-hook-secret-0123456789"

// receiver is a notification webhook endpoint: it checks signatures and
// records, per booking, the order in which versions first arrived.
type receiver struct {
	mu     sync.Mutex
	key    []byte
	seen   map[string]int // webhook-id → deliveries
	first  []string       // event ids in the order their sms first arrived
	badSig int
	url    string
}

func newReceiver(t testing.TB) *receiver {
	t.Helper()
	key, err := config.WebhookKey(hookSecret)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{key: key, seen: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	r.url = "http://" + ln.Addr().String() + "/notify"
	return r
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	id, ts := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp")
	sec, _ := strconv.ParseInt(ts, 10, 64)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !hmac.Equal([]byte(events.Sign(r.key, id, sec, body)), []byte(req.Header.Get("webhook-signature"))) {
		r.badSig++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var n events.Notification
	if err := json.Unmarshal(body, &n); err != nil || n.ID != id {
		r.badSig++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.seen[id]++
	if r.seen[id] == 1 && n.Channel == "sms" {
		r.first = append(r.first, strings.TrimSuffix(id, ":sms"))
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) ids() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.seen))
	for k, v := range r.seen {
		out[k] = v
	}
	return out
}

// process is a berth subcommand running as its own process.
type process struct {
	cmd  *exec.Cmd
	done chan error
}

// startBerth runs `berth <command>` on the env's database with the test
// secrets and waits until it listens.
func startBerth(t testing.TB, command, dbURL string, env ...string) *process {
	t.Helper()
	cmd := exec.Command(apptest.Binary(t), command)
	cmd.Env = append(os.Environ(), "BERTH_HTTP_ADDR=127.0.0.1:0", "BERTH_PAYSIM=on", "BERTH_DATABASE_URL="+dbURL,
		"BERTH_AUTH_SECRET="+apptest.AuthSecret, "BERTH_WEBHOOK_SECRET="+apptest.WebhookSecret,
		"BERTH_LOG_LEVEL=info", "GORACE=halt_on_error=1")
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, done: make(chan error, 1)}
	up := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, `"msg":"listening"`) || strings.Contains(line, `"msg":"worker listening"`) {
				select {
				case up <- struct{}{}:
				default:
				}
			}
			if strings.Contains(line, "DATA RACE") || strings.Contains(line, `"level":"ERROR"`) {
				t.Errorf("berth %s: %s", command, line)
			}
		}
		p.done <- cmd.Wait()
	}()
	select {
	case <-up:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("berth %s did not start", command)
	}
	t.Cleanup(func() { p.stop(t) })
	return p
}

// kill ends the process at once, as a crash would.
func (p *process) kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	if err := <-p.done; err == nil {
		t.Errorf("berth exited cleanly: it was not killed mid-stream")
	}
	p.done = nil
}

// stop asks the process to shut down and fails t unless it does cleanly.
func (p *process) stop(t testing.TB) {
	if p.done == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("berth exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Errorf("berth did not stop within 30s of SIGTERM")
	}
	p.done = nil
}

// TestInProcessEventsSurviveServeCrashAndRestart runs `berth serve` with
// in-process consumers and a notification webhook, kills it while events
// flow, starts it again, and checks that every change was notified (on
// every channel, each at least once, first arrivals in order) and tickets
// were issued exactly once.
func TestInProcessEventsSurviveServeCrashAndRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	rcv := newReceiver(t)
	hookEnv := []string{"BERTH_NOTIFY_WEBHOOK_URL=" + rcv.url, "BERTH_HOOK_SECRET=" + hookSecret, "BERTH_OUTBOX_POLL_INTERVAL=100ms"}
	first := startBerth(t, "serve", e.url, hookEnv...)

	// Kill it half-way through the changes, without warning.
	const bookings, changes = 60, 12
	var count atomic.Int64
	half := make(chan struct{})
	killed := make(chan struct{})
	go func() {
		<-half
		first.kill(t)
		close(killed)
	}()
	e.workload(t, bookings, changes, 4, func(int64, int) {
		if count.Add(1) == bookings*changes/2 {
			close(half)
		}
	})
	<-killed
	startBerth(t, "serve", e.url, hookEnv...)
	e.waitNotified(t, rcv, 2*time.Minute)
	e.waitPublished(t, time.Minute)
	e.checkTickets(t)
}

// waitPublished waits until no event is left unpublished. Consumers take
// events at their own pace: the notifications being done does not mean the
// tickets are, and an event is published once every consumer has it.
func (e *env) waitPublished(t testing.TB, within time.Duration) {
	t.Helper()
	apptest.Eventually(t, within, "events left unpublished", func() bool {
		var left int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
}

// waitNotified waits until every booking event was notified on every
// channel, then checks the first arrivals' order per booking.
func (e *env) waitNotified(t testing.TB, rcv *receiver, within time.Duration) {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT event_id::text, booking_id, (payload->>'version')::int FROM outbox
		WHERE type LIKE 'booking.%' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type ev struct {
		id      string
		booking int64
		version int
	}
	var all []ev
	for rows.Next() {
		var x ev
		if err := rows.Scan(&x.id, &x.booking, &x.version); err != nil {
			t.Fatal(err)
		}
		all = append(all, x)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	apptest.Eventually(t, within, "not every event was notified on every channel", func() bool {
		seen := rcv.ids()
		for _, x := range all {
			for _, ch := range events.Channels {
				if seen[x.id+":"+ch] == 0 {
					return false
				}
			}
		}
		return true
	})
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if rcv.badSig > 0 {
		t.Errorf("%d webhooks with a bad signature or body", rcv.badSig)
	}
	dups := 0
	for _, c := range rcv.seen {
		dups += c - 1
	}
	version := make(map[string]ev, len(all))
	for _, x := range all {
		version[x.id] = x
	}
	last := map[int64]int{}
	for _, id := range rcv.first {
		x := version[id]
		if x.version != last[x.booking]+1 {
			t.Errorf("booking %d: version %d notified first after version %d", x.booking, x.version, last[x.booking])
		}
		last[x.booking] = x.version
	}
	t.Logf("%d events notified on %d channels; %d redelivered notifications", len(all), len(events.Channels), dups)
}

// TestWorkerRunsEventsForAServeWithout runs the API and the event
// machinery as separate processes: `berth serve` with
// BERTH_EVENTS_IN_SERVE=false publishes nothing, and `berth worker`
// relays and consumes.
func TestWorkerRunsEventsForAServeWithout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	rcv := newReceiver(t)
	hookEnv := []string{"BERTH_NOTIFY_WEBHOOK_URL=" + rcv.url, "BERTH_HOOK_SECRET=" + hookSecret, "BERTH_OUTBOX_POLL_INTERVAL=100ms"}
	startBerth(t, "serve", e.url, append(hookEnv, "BERTH_EVENTS_IN_SERVE=false")...)
	e.workload(t, 10, 12, 2, nil)
	var published int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`).Scan(&published); err != nil {
		t.Fatal(err)
	}
	if published != 0 {
		t.Errorf("serve with events off published %d events", published)
	}
	// A worker needs the public URL for its refunds' webhooks; this
	// workload pays nothing, so no gateway ever calls it.
	startBerth(t, "worker", e.url, append(hookEnv, "BERTH_PUBLIC_URL=http://127.0.0.1:9")...)
	e.waitNotified(t, rcv, time.Minute)
	e.waitPublished(t, time.Minute)
	e.checkTickets(t)
}
