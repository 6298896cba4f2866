package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/base"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/events"
	"berth.dev/berth/internal/outbox"
)

func TestHookSignsAndRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef")
	var calls atomic.Int32
	var mu sync.Mutex
	var ids []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		ids = append(ids, r.Header.Get("webhook-id"))
		mu.Unlock()
		ts := r.Header.Get("webhook-timestamp")
		if ts != "1796115600" || r.Header.Get("webhook-signature") != events.Sign(key, "evt-1", 1796115600, body) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	h := events.NewHook(srv.URL, key, clock.NewFake(epoch))
	h.BaseBackoff = time.Millisecond
	if err := h.Post(context.Background(), "evt-1", []byte(`{"a":1}`)); err != nil {
		t.Fatalf("post after two 503s: %v", err)
	}
	if calls.Load() != 3 {
		t.Errorf("%d signed calls, want 3 (two retried 503s)", calls.Load())
	}
	for _, id := range ids {
		if id != "evt-1" {
			t.Errorf("retry carried webhook-id %q, want the same id every time", id)
		}
	}

	// A 4xx other than 408/429 is not retried; a dead server is, then gives up.
	var rejected atomic.Int32
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rejected.Add(1)
		w.WriteHeader(http.StatusBadRequest)
	}))
	defer bad.Close()
	h.URL = bad.URL
	if err := h.Post(context.Background(), "evt-2", []byte(`{}`)); err == nil || rejected.Load() != 1 {
		t.Errorf("400: err %v after %d calls, want an error after 1", err, rejected.Load())
	}
	bad.Close()
	if err := h.Post(context.Background(), "evt-3", []byte(`{}`)); err == nil {
		t.Error("post to a closed server succeeded")
	}
}

// sink is a Sender that remembers what it sent and can fail.
type sink struct {
	mu   sync.Mutex
	sent []events.Notification
	fail bool
}

func (s *sink) Send(_ context.Context, n events.Notification) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return errors.New("sms gateway down")
	}
	s.sent = append(s.sent, n)
	return nil
}

// deliver runs consumer c on each message through a dispatcher, as the
// relay would.
func deliver(t *testing.T, d *events.Dispatcher, c events.Consumer, evs ...events.Event) {
	t.Helper()
	for _, ev := range evs {
		if err := d.Deliver(context.Background(), c, ev); err != nil {
			t.Fatal(err)
		}
	}
}

// eventsOf returns a booking's events from the outbox, in order.
func (e *env) eventsOf(t *testing.T, id int64) []events.Event {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT id, event_id::text, booking_id, type, payload, created_at FROM outbox
		WHERE booking_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outbox.Message, error) {
		var m outbox.Message
		err := r.Scan(&m.Seq, &m.EventID, &m.BookingID, &m.Type, &m.Payload, &m.Time)
		return m, err
	})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]events.Event, len(msgs))
	for i, m := range msgs {
		out[i] = events.FromMessage(m)
	}
	return out
}

func TestNotificationsOnEveryStatusChangeEveryChannel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	f := e.createFlight(t)
	id, err := e.hold(context.Background(), f, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.confirm(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if err := e.cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	evs := e.eventsOf(t, id) // held, confirmed, cancelled, refund.requested
	s := &sink{}
	reg := prometheus.NewRegistry()
	d := e.dispatcher(reg)
	d.Attempts = 1
	deliver(t, d, events.Notifications{Sender: s}, append(evs, evs...)...)
	if len(s.sent) != 9 {
		t.Fatalf("%d notifications for 3 status changes on 3 channels (each delivered twice), want 9", len(s.sent))
	}
	want := []booking.Status{booking.Held, booking.Held, booking.Held, booking.Confirmed, booking.Confirmed, booking.Confirmed,
		booking.Cancelled, booking.Cancelled, booking.Cancelled}
	for i, n := range s.sent {
		if n.Status != want[i] || n.Channel != events.Channels[i%3] || n.CustomerID != 7 || n.BookingID != id || n.ID != evs[i/3].ID+":"+n.Channel {
			t.Errorf("notification %d: %+v", i, n)
		}
	}
	if d := metric(t, reg, "berth_consumer_duplicates_total", events.NotificationsName); d != 3 {
		t.Errorf("duplicates %v, want 3", d)
	}
	// A sender that fails parks the event instead of losing it.
	id2, _ := e.hold(context.Background(), f, nil, 1)
	s.fail = true
	deliver(t, d, events.Notifications{Sender: s}, e.eventsOf(t, id2)...)
	if n := e.parked(t); n != 1 {
		t.Errorf("%d parked after a failed send, want 1", n)
	}
}

func TestTicketsIgnoreOlderEventsAndVoidOnCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	f := e.createFlight(t)
	ctx := context.Background()
	seatID, _ := e.hold(ctx, f, []string{"3A", "3B"}, 0)
	qtyID, _ := e.hold(ctx, f, nil, 3)
	carLike, _ := e.hold(ctx, f, nil, 1) // stays HELD: no tickets
	for _, id := range []int64{seatID, qtyID} {
		if err := e.confirm(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	d := e.dispatcher(prometheus.NewRegistry())
	tk := events.Tickets{Clock: e.clock}
	deliver(t, d, tk, e.eventsOf(t, seatID)...)
	deliver(t, d, tk, e.eventsOf(t, qtyID)...)
	deliver(t, d, tk, e.eventsOf(t, carLike)...)
	ts, err := events.TicketsOf(ctx, e.pool, seatID)
	if err != nil || len(ts) != 2 || ts[0].SeatNo != "3A" || ts[1].SeatNo != "3B" || ts[0].Status != "ISSUED" || len(ts[0].Number) != 13 {
		t.Fatalf("seat booking tickets %+v, %v", ts, err)
	}
	if ts, _ := events.TicketsOf(ctx, e.pool, qtyID); len(ts) != 3 || ts[2].Unit != 3 || ts[2].SeatNo != "" {
		t.Errorf("quantity booking tickets %+v", ts)
	}
	if ts, _ := events.TicketsOf(ctx, e.pool, carLike); len(ts) != 0 {
		t.Errorf("held booking has tickets %+v", ts)
	}
	if err := e.cancel(ctx, seatID); err != nil {
		t.Fatal(err)
	}
	evs := e.eventsOf(t, seatID)
	deliver(t, d, tk, evs...)
	if ts, _ := events.TicketsOf(ctx, e.pool, seatID); len(ts) != 2 || ts[0].Status != "VOID" || ts[1].Status != "VOID" {
		t.Errorf("after cancel: %+v", ts)
	}
	// The confirmed event again, under a new id (as a replay from another
	// source would be): older than what was seen, so ignored.
	old := evs[1]
	old.ID = "00000000-0000-4000-8000-000000000001"
	deliver(t, d, tk, old)
	if ts, _ := events.TicketsOf(ctx, e.pool, seatID); len(ts) != 2 || ts[0].Status != "VOID" {
		t.Errorf("an older confirmed event re-issued tickets: %+v", ts)
	}
	e.checkTickets(t)
}

// hookServer records what a Hook posted.
func hookServer(t *testing.T) (*httptest.Server, func() []events.CheckinMessage) {
	var mu sync.Mutex
	var got []events.CheckinMessage
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m events.CheckinMessage
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv, func() []events.CheckinMessage {
		mu.Lock()
		defer mu.Unlock()
		return append([]events.CheckinMessage(nil), got...)
	}
}

func TestCheckinSyncsConfirmedAndTheirCancellations(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	srv, got := hookServer(t)
	c := events.Checkin{Hook: events.NewHook(srv.URL, []byte("0123456789abcdef"), e.clock), Log: e.log}
	f := e.createFlight(t)
	ctx := context.Background()
	confirmed, _ := e.hold(ctx, f, nil, 1)
	heldOnly, _ := e.hold(ctx, f, nil, 1)
	if err := e.confirm(ctx, confirmed); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{confirmed, heldOnly} {
		if err := e.cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	d := e.dispatcher(reg)
	d.Attempts = 1
	deliver(t, d, c, e.eventsOf(t, confirmed)...)
	deliver(t, d, c, e.eventsOf(t, heldOnly)...)
	deliver(t, d, c, e.eventsOf(t, confirmed)...) // redelivered: nothing more
	msgs := got()
	if len(msgs) != 2 || msgs[0].Type != outbox.BookingConfirmed || msgs[1].Type != outbox.BookingCancelled ||
		msgs[0].Booking.BookingID != confirmed || msgs[1].Booking.Status != booking.Cancelled {
		t.Fatalf("check-in got %+v, want the confirmation and cancellation of booking %d only", msgs, confirmed)
	}
}

func TestDecodeRejectsForeignRecords(t *testing.T) {
	t.Parallel()
	m := outbox.Message{EventID: "6f1c4c55-3a3e-4bb7-9c3a-5d2b6a0f1e22", BookingID: 9, Type: outbox.BookingHeld,
		Payload: json.RawMessage(`{"bookingId":9}`), Time: epoch}
	v, err := m.MarshalEnvelope()
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.Decode(v)
	if err != nil || e.ID != m.EventID || e.BookingID != 9 || e.Type != m.Type || !e.Time.Equal(epoch) || string(e.Data) != `{"bookingId":9}` {
		t.Fatalf("round trip: %+v, %v", e, err)
	}
	m.EventID = "not-a-uuid"
	v, _ = m.MarshalEnvelope()
	if _, err := events.Decode(v); err == nil {
		t.Error("an event id that is not a UUID was accepted")
	}
	if _, err := events.Decode([]byte(`{"hello":"world"}`)); err == nil {
		t.Error("a foreign record was accepted")
	}
}

func TestPruneDeletesOnlyOldPublishedEventsAndRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	ctx := context.Background()
	f := e.createFlight(t)
	id, _ := e.hold(ctx, f, nil, 1)
	_ = id
	reg := prometheus.NewRegistry()
	w, err := events.NewWorker(base.Archetype{Log: e.log, Clock: e.clock, Registry: reg}, e.pool, events.Settings{Retention: 24 * time.Hour}, []events.Consumer{events.Tickets{Clock: e.clock}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Relays[0].Pass(ctx); err != nil {
		t.Fatal(err)
	}
	id2, _ := e.hold(ctx, f, nil, 1) // unpublished: kept whatever its age
	_ = id2
	if ev, rec, err := w.Prune(ctx); err != nil || ev != 0 || rec != 0 {
		t.Fatalf("pruned %d events, %d records (%v) before the retention period", ev, rec, err)
	}
	e.clock.Advance(25 * time.Hour)
	if ev, rec, err := w.Prune(ctx); err != nil || ev != 1 || rec != 1 {
		t.Fatalf("pruned %d events, %d records (%v), want 1 and 1", ev, rec, err)
	}
	var left int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&left); err != nil || left != 1 {
		t.Errorf("%d unpublished left (%v), want 1", left, err)
	}
	if _, err := events.NewWorker(base.Archetype{Log: e.log, Clock: e.clock, Registry: prometheus.NewRegistry()}, e.pool, events.Settings{Retention: time.Hour}, []events.Consumer{events.Tickets{}, events.Tickets{}}); err == nil || !strings.Contains(err.Error(), "named") {
		t.Errorf("two consumers with one name: %v, want refused", err)
	}
	// The retention and the topic have no defaults of their own here:
	// berth's are its settings' (BERTH_EVENT_RETENTION, BERTH_KAFKA_TOPIC).
	if _, err := events.NewWorker(base.Archetype{Log: e.log, Clock: e.clock, Registry: prometheus.NewRegistry()}, e.pool, events.Settings{}, []events.Consumer{events.Tickets{}}); err == nil || !strings.Contains(err.Error(), "retention") {
		t.Errorf("no retention: %v, want refused", err)
	}
	if _, err := events.NewWorker(base.Archetype{Log: e.log, Clock: e.clock, Registry: prometheus.NewRegistry()}, e.pool, events.Settings{Retention: time.Hour, KafkaBrokers: []string{"127.0.0.1:1"}}, []events.Consumer{events.Tickets{}}); err == nil || !strings.Contains(err.Error(), "topic") {
		t.Errorf("brokers without a topic: %v, want refused", err)
	}
}

// The same event twice in one batch (a relay that published it again before
// Kafka delivered the first copy) is handled once; the second copy is a
// duplicate.
func TestSameEventTwiceInOneBatchActsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	f := e.createFlight(t)
	id, err := e.hold(context.Background(), f, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	evs := e.eventsOf(t, id)
	if len(evs) == 0 {
		t.Fatal("the hold wrote no event")
	}
	reg := prometheus.NewRegistry()
	d := e.dispatcher(reg)
	rec := newRecorder("recorder")
	batch := append(append([]events.Event{}, evs...), evs...)
	if err := d.DeliverAll(context.Background(), []events.Consumer{rec}, batch); err != nil {
		t.Fatal(err)
	}
	rec.check(t)
	if n := metric(t, reg, "berth_consumer_duplicates_total", "recorder"); n != float64(len(evs)) {
		t.Errorf("%g duplicates counted, want %d (each event's second copy)", n, len(evs))
	}
	if n := metric(t, reg, "berth_consumer_processed_total", "recorder"); n != float64(len(evs)) {
		t.Errorf("%g events processed, want %d", n, len(evs))
	}
}
