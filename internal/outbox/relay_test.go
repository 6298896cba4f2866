package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

var epoch = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// recorder is a publisher that remembers what it was given, and can be told
// to fail.
type recorder struct {
	mu    sync.Mutex
	got   []outbox.Message
	fail  atomic.Bool
	delay time.Duration
}

func (r *recorder) Publish(ctx context.Context, msgs []outbox.Message) error {
	if r.fail.Load() {
		return errors.New("broker down")
	}
	if r.delay > 0 {
		time.Sleep(time.Duration(rand.Int64N(int64(r.delay))))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, msgs...)
	return nil
}

func (r *recorder) messages() []outbox.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outbox.Message(nil), r.got...)
}

type payload struct {
	N int `json:"n"`
}

// write inserts the events of each booking in order, bookings in parallel.
func write(t *testing.T, pool *pgxpool.Pool, bookings, perBooking int) {
	t.Helper()
	writeFrom(t, pool, 1, bookings, perBooking)
}

// writeFrom writes the events of bookings first..last.
func writeFrom(t *testing.T, pool *pgxpool.Pool, first, last, perBooking int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, last-first+1)
	for b := first; b <= last; b++ {
		wg.Go(func() {
			for n := 1; n <= perBooking; n++ {
				err := pg.InTx(context.Background(), pool, func(tx pgx.Tx) error {
					return outbox.Write(context.Background(), tx, outbox.Event{BookingID: int64(b), Type: outbox.BookingHeld,
						Data: payload{N: n}, Time: epoch})
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func unpublished(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkOrder checks that every booking's events were received in the order
// written, allowing a redelivered prefix (at least once) but never a
// later event before an earlier one was first seen.
func checkOrder(t *testing.T, got []outbox.Message, bookings, perBooking int) {
	t.Helper()
	next := map[int64]int{}
	for _, m := range got {
		var p payload
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			t.Fatal(err)
		}
		want := next[m.BookingID] + 1
		switch {
		case p.N == want:
			next[m.BookingID] = want
		case p.N < want:
			// a redelivery of an event already seen
		default:
			t.Fatalf("booking %d: event %d arrived before event %d", m.BookingID, p.N, want)
		}
	}
	for b := int64(1); b <= int64(bookings); b++ {
		if next[b] != perBooking {
			t.Errorf("booking %d: %d of %d events arrived", b, next[b], perBooking)
		}
	}
}

func TestRelaysShareStreamsAndKeepEachBookingsOrder(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	const bookings, perBooking = 200, 10
	pub := &recorder{delay: 2 * time.Millisecond}
	// A backlog first, each booking's events next to each other, so that
	// batches (of 7) split bookings and the relays compete for the halves;
	// then more events while they run.
	_, err := pool.Exec(context.Background(), `INSERT INTO outbox (booking_id, type, payload, created_at)
		SELECT b, 'booking.held', jsonb_build_object('n', n), $2
		FROM generate_series(1, $1::int) b, generate_series(1, $3::int) n ORDER BY b, n`, bookings/2, epoch, perBooking)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		r := &outbox.Relay{DB: pool, Pub: pub, Clock: clock.NewFake(epoch), StreamsPerPass: 3, BatchSize: 7, PollInterval: 5 * time.Millisecond}
		wg.Go(func() { r.Run(ctx) })
	}
	writeFrom(t, pool, bookings/2+1, bookings, perBooking)
	apptest.Eventually(t, 60*time.Second, "events left unpublished", func() bool { return unpublished(t, pool) == 0 })
	cancel()
	wg.Wait()
	if n := unpublished(t, pool); n != 0 {
		t.Fatalf("%d events left unpublished", n)
	}
	got := pub.messages()
	if len(got) != bookings*perBooking {
		t.Errorf("published %d messages for %d events: nothing should be sent twice without a failure", len(got), bookings*perBooking)
	}
	checkOrder(t, got, bookings, perBooking)
}

func TestCrashBetweenPublishAndMarkPublishesAgain(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	write(t, pool, 3, 2)
	pub := &recorder{}
	r := &outbox.Relay{DB: pool, Pub: pub, Clock: clock.NewFake(epoch)}
	crashes := 0
	r.AfterPublish = func(context.Context, []outbox.Message) error {
		if crashes == 0 {
			crashes++
			return errors.New("injected crash")
		}
		return nil
	}
	if _, err := r.Pass(context.Background()); err == nil {
		t.Fatal("the pass with a crash after publishing reported success")
	}
	if n := unpublished(t, pool); n != 6 {
		t.Fatalf("after the crash %d events are unpublished, want all 6", n)
	}
	if n, err := r.Pass(context.Background()); err != nil || n != 6 {
		t.Fatalf("second pass: %d, %v", n, err)
	}
	got := pub.messages()
	if len(got) != 12 {
		t.Fatalf("publisher saw %d messages, want every event twice (12)", len(got))
	}
	checkOrder(t, got, 3, 2)
	if n := unpublished(t, pool); n != 0 {
		t.Fatalf("%d events unpublished after the second pass", n)
	}
}

func TestFailedPublishKeepsEventsAndBacklogMetrics(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	write(t, pool, 2, 3)
	reg := prometheus.NewRegistry()
	m := outbox.NewMetrics(reg)
	pub := &recorder{}
	pub.fail.Store(true)
	r := &outbox.Relay{DB: pool, Pub: pub, Clock: clock.NewFake(epoch), Metrics: m}
	if _, err := r.Pass(context.Background()); err == nil {
		t.Fatal("a pass whose publishing failed reported success")
	}
	if n := unpublished(t, pool); n != 6 {
		t.Fatalf("%d unpublished after a failed publish, want 6", n)
	}
	b, err := outbox.ReadBacklog(context.Background(), pool)
	if err != nil || b.Rows != 6 || !b.Oldest.Equal(epoch) {
		t.Fatalf("backlog %+v, %v", b, err)
	}
	if v := apptest.Metric(t, reg, "berth_outbox_publish_errors_total"); v != 1 {
		t.Errorf("publish errors metric %v, want 1", v)
	}
	pub.fail.Store(false)
	if n, err := r.Pass(context.Background()); err != nil || n != 6 {
		t.Fatalf("pass after recovery: %d, %v", n, err)
	}
	if n := unpublished(t, pool); n != 0 {
		t.Fatalf("%d unpublished after recovery", n)
	}
	if v := apptest.Metric(t, reg, "berth_outbox_published_total"); v != 6 {
		t.Errorf("published metric %v, want 6", v)
	}
}

func TestNotifyWakesTheRelayWithoutPolling(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	published := make(chan struct{}, 16)
	pub := publisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		published <- struct{}{}
		return nil
	})
	wake := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listening := make(chan struct{}, 1)
	connect := func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, pool.Config().ConnConfig) }
	go outbox.Listen(ctx, connect, func() {
		select {
		case listening <- struct{}{}:
		default:
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}, slogDiscard())
	<-listening // the listener signals once when it has subscribed
	r := &outbox.Relay{DB: pool, Pub: pub, Clock: clock.NewFake(epoch), Wake: wake, PollInterval: time.Hour}
	go r.Run(ctx)
	write(t, pool, 1, 1)
	select {
	case <-published:
	case <-time.After(30 * time.Second):
		t.Fatal("the event was not published: no wake-up from NOTIFY (polling is once an hour)")
	}
}

type publisherFunc func(ctx context.Context, msgs []outbox.Message) error

func (f publisherFunc) Publish(ctx context.Context, msgs []outbox.Message) error { return f(ctx, msgs) }

func TestDeletePublishedKeepsUnpublishedAndRecent(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	write(t, pool, 1, 5)
	_, err := pool.Exec(ctx, `UPDATE outbox SET published_at = CASE WHEN id <= (SELECT min(id) + 1 FROM outbox) THEN $1::timestamptz
		WHEN id = (SELECT min(id) + 2 FROM outbox) THEN $2::timestamptz END`, epoch.Add(-48*time.Hour), epoch)
	if err != nil {
		t.Fatal(err)
	}
	n, err := outbox.DeletePublished(ctx, pool, epoch.Add(-24*time.Hour), 1, 10)
	if err != nil || n != 2 {
		t.Fatalf("deleted %d, %v; want the 2 old published events", n, err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&left); err != nil || left != 3 {
		t.Fatalf("%d events left, %v; want 3 (one recent, two unpublished)", left, err)
	}
}

func TestEnvelopeIsCloudEvents(t *testing.T) {
	t.Parallel()
	m := outbox.Message{Seq: 7, EventID: "2f1b0c3e-8a55-4c2e-9a57-6d0f3b8e9c11", BookingID: 42, Type: outbox.BookingConfirmed,
		Payload: json.RawMessage(`{"bookingId":42,"status":"CONFIRMED"}`), Time: time.Date(2026, 12, 1, 9, 0, 0, 123000, time.FixedZone("x", 3600))}
	rec, err := outbox.Record("booking-events", m)
	if err != nil {
		t.Fatal(err)
	}
	if string(rec.Key) != "42" || rec.Topic != "booking-events" {
		t.Errorf("key %q topic %q", rec.Key, rec.Topic)
	}
	headers := map[string]string{}
	for _, h := range rec.Headers {
		headers[h.Key] = string(h.Value)
	}
	if headers["ce_id"] != m.EventID {
		t.Errorf("ce_id header %q", headers["ce_id"])
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Value, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"specversion": "1.0", "id": m.EventID, "type": "booking.confirmed", "source": outbox.Source,
		"time": "2026-12-01T08:00:00.000123Z", "subject": "42", "datacontenttype": "application/json",
		"data": map[string]any{"bookingId": float64(42), "status": "CONFIRMED"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("envelope\n got %v\nwant %v", got, want)
	}
	ce, err := outbox.ParseEnvelope(rec.Value)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := ce.BookingID(); id != 42 {
		t.Errorf("subject round trip: %d", id)
	}
	for _, bad := range []string{`{}`, `{"specversion":"0.3","id":"x","type":"t","subject":"1"}`,
		`{"specversion":"1.0","id":"x","type":"t","subject":"abc"}`, `not json`} {
		if _, err := outbox.ParseEnvelope([]byte(bad)); err == nil {
			t.Errorf("ParseEnvelope(%s) accepted it", bad)
		}
	}
}

// A relay takes its polling period from BERTH_OUTBOX_POLL_INTERVAL's
// setting and has no default of its own: zero is refused.
func TestRunRefusesZeroPollInterval(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "PollInterval") {
			t.Errorf("Run with a zero PollInterval: %v, want a panic naming PollInterval", r)
		}
	}()
	(&outbox.Relay{DB: pgtest.NewPool(t), Pub: &recorder{}, Clock: clock.NewFake(epoch)}).Run(ctx)
}

// TestPassClaimsAndMarksInOneRoundTrip: a pass is its transaction's begin,
// one pipeline that claims the batch and marks it published (each event
// row written once), and the commit after publishing; the marks still
// commit only with the pass, so a failed publish leaves every event to
// publish again.
func TestPassClaimsAndMarksInOneRoundTrip(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	counter := &pgtest.RoundTrips{}
	pool, err := pg.Open(context.Background(), url, pg.PoolConfig{MaxConns: 2, Tracer: counter})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	write(t, pool, 5, 2)
	pub := &recorder{}
	pub.fail.Store(true)
	r := &outbox.Relay{DB: pool, Pub: pub, Clock: clock.NewFake(epoch)}
	if _, err := r.Pass(context.Background()); err == nil {
		t.Fatal("a pass whose publisher failed reported success")
	}
	if n := unpublished(t, pool); n != 10 {
		t.Fatalf("after a failed publish %d events are unpublished, want all 10", n)
	}
	pub.fail.Store(false)
	before := len(counter.Taken())
	n, err := r.Pass(context.Background())
	if err != nil || n != 10 {
		t.Fatalf("pass: %d, %v; want 10 events", n, err)
	}
	trips := counter.Taken()[before:]
	if len(trips) != 3 || trips[0] != "begin" || trips[1] != "pipeline" || trips[2] != "commit" {
		t.Errorf("a pass of 10 events took %d round trips %q; want begin, one pipeline (claim and mark), commit", len(trips), trips)
	}
	checkOrder(t, pub.messages(), 5, 2)
	if n := unpublished(t, pool); n != 0 {
		t.Fatalf("%d events unpublished after the pass", n)
	}
}

// TestUnpublishedEventsAreIndexedOnce: an unpublished event costs one
// index entry for being unpublished (by stream and id, which the claim
// reads); the look for any unpublished event and the backlog read the same
// index.
func TestUnpublishedEventsAreIndexedOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	rows, err := pool.Query(context.Background(), `SELECT indexname FROM pg_indexes
		WHERE schemaname = 'public' AND tablename = 'outbox' AND indexdef LIKE '%WHERE (published_at IS NULL)%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != "outbox_stream_unpublished_idx" {
		t.Errorf("indexes of unpublished events: %q; want only outbox_stream_unpublished_idx", names)
	}
}
