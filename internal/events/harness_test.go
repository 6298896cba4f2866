package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/audit"
	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/events"
	"berth.dev/berth/internal/flight"
	"berth.dev/berth/internal/payment/paytest"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
	"berth.dev/berth/internal/policy"
)

func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}

var epoch = apptest.Epoch

// env is a database with flights, and the booking lifecycle to change
// bookings with, as the API would.
type env struct {
	url     string
	pool    *pgxpool.Pool
	clock   *clock.Fake
	flights *flight.Service
	life    *booking.Lifecycle
	log     *slog.Logger
}

func newEnv(t testing.TB, url string) *env {
	t.Helper()
	if url == "" {
		url = pgtest.NewURL(t)
	}
	pool, err := pg.Open(context.Background(), url, pg.PoolConfig{MaxConns: 12, AppName: "berth-events-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c := clock.NewFake(epoch)
	fs := flight.NewService(pool, c, flight.Config{HoldTTL: 10 * time.Minute, SeatMapTTL: time.Nanosecond, SearchTTL: time.Nanosecond})
	e := &env{url: url, pool: pool, clock: c, flights: fs,
		life: booking.NewLifecycle(c, map[booking.Kind]booking.Inventory{booking.KindFlight: fs.Inventory()}),
		log:  slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	_, err = pool.Exec(context.Background(), `CREATE TABLE IF NOT EXISTS test_seen (
		consumer text, booking_id bigint, version int, PRIMARY KEY (consumer, booking_id))`)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

var flightNo atomic.Int64

// createFlight creates a flight with 120 numbered seats and room for
// quantity bookings besides.
func (e *env) createFlight(t testing.TB) int64 {
	t.Helper()
	dep := epoch.Add(72 * time.Hour)
	f, err := e.flights.Create(context.Background(), flight.NewFlight{
		Code: fmt.Sprintf("VN%d", 1000+flightNo.Add(1)), From: "SGN", To: "HAN", DepartureAt: dep, ArrivalAt: dep.Add(2 * time.Hour),
		Fares: []flight.NewFare{{Class: "ECONOMY", Price: 1_000_000, Currency: "VND", Capacity: 1000,
			Seats: apptest.Seats(1, 20, "ABCDEF"), RefundRule: policy.Rule{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return f.ID
}

func (e *env) hold(ctx context.Context, flightID int64, seats []string, qty int) (int64, error) {
	b, err := e.flights.Hold(ctx, flight.HoldRequest{CustomerID: 7, FlightID: flightID, FareClass: "ECONOMY", Seats: seats, Quantity: qty})
	if err != nil {
		return 0, err
	}
	return b.ID, nil
}

// touch records a change that keeps the status (a new version and its
// event), locking the booking row first as every real change does.
func (e *env) touch(ctx context.Context, id int64) error {
	return pg.InTx(ctx, e.pool, func(tx pgx.Tx) error {
		now := e.clock.Now()
		b, err := booking.Scan(tx.QueryRow(ctx, `UPDATE booking SET version = version + 1, updated_at = $2
			WHERE id = $1 RETURNING `+booking.Columns, id, now))
		if err != nil {
			return err
		}
		return booking.Record(ctx, tx, b, now)
	})
}

func (e *env) confirm(ctx context.Context, id int64) error {
	return pg.InTx(ctx, e.pool, func(tx pgx.Tx) error {
		return paytest.Confirm(ctx, tx, e.life, id)
	})
}

func (e *env) cancel(ctx context.Context, id int64) error {
	_, err := e.life.Cancel(ctx, e.pool, auth.Caller{ID: 1, Role: "admin"}, id)
	return err
}

// workload makes `bookings` bookings on new flights and changes each
// `changes` times (at least 12): held, touched, confirmed, touched, and
// every other one cancelled at the end. Bookings change concurrently, each
// booking's changes in order, interleaved so that one booking's events are
// spread through the outbox. It returns the booking ids. onCommit, if not
// nil, is told each change's booking and version right after it committed.
func (e *env) workload(t testing.TB, bookings, changes, writers int, onCommit func(id int64, version int)) []int64 {
	t.Helper()
	ctx := context.Background()
	perFlight := 100
	var flights []int64
	for range (bookings + perFlight - 1) / perFlight {
		flights = append(flights, e.createFlight(t))
	}
	ids := make([]int64, bookings)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for step := range changes {
				for i := w; i < bookings; i += writers {
					var err error
					switch {
					case step == 0:
						f := flights[i/perFlight]
						if k := i % perFlight; k%2 == 0 {
							row := 1 + k/6
							col := string("ABCDEF"[k%6])
							next := string("ABCDEF"[k%6+1])
							ids[i], err = e.hold(ctx, f, []string{fmt.Sprint(row) + col, fmt.Sprint(row) + next}, 0)
						} else {
							ids[i], err = e.hold(ctx, f, nil, 1+i%3)
						}
					case step == changes/2:
						err = e.confirm(ctx, ids[i])
					case step == changes-1 && i%2 == 0:
						err = e.cancel(ctx, ids[i])
					default:
						err = e.touch(ctx, ids[i])
					}
					if err != nil {
						errs <- fmt.Errorf("booking #%d step %d: %w", i, step, err)
						return
					}
					if onCommit != nil {
						onCommit(ids[i], step+1)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return ids
}

// recorder is a consumer that checks, in the database and in the same
// transaction as its "effect", that each booking's versions arrive one
// after another: never twice, never skipped, never out of order.
type recorder struct {
	name       string
	mu         sync.Mutex
	violations []string
	arrived    map[int64]time.Time // booking<<8|version → when handled (optional)
	handled    atomic.Int64
}

func newRecorder(name string) *recorder { return &recorder{name: name} }

func (r *recorder) Name() string              { return r.name }
func (r *recorder) Wants(e events.Event) bool { return len(e.Type) > 8 && e.Type[:8] == "booking." }
func (r *recorder) violate(f string, a ...any) {
	r.mu.Lock()
	r.violations = append(r.violations, fmt.Sprintf(f, a...))
	r.mu.Unlock()
}

func (r *recorder) Handle(ctx context.Context, tx pgx.Tx, e events.Event) error {
	var v booking.View
	if err := json.Unmarshal(e.Data, &v); err != nil {
		return err
	}
	if v.BookingID != e.BookingID {
		r.violate("event %s: subject %d but data for booking %d", e.ID, e.BookingID, v.BookingID)
	}
	var tag interface{ RowsAffected() int64 }
	var err error
	if v.Version == 1 {
		tag, err = tx.Exec(ctx, `INSERT INTO test_seen (consumer, booking_id, version) VALUES ($1, $2, 1) ON CONFLICT DO NOTHING`, r.name, v.BookingID)
	} else {
		tag, err = tx.Exec(ctx, `UPDATE test_seen SET version = $3 WHERE consumer = $1 AND booking_id = $2 AND version = $3 - 1`, r.name, v.BookingID, v.Version)
	}
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		var last int
		_ = tx.QueryRow(ctx, `SELECT version FROM test_seen WHERE consumer = $1 AND booking_id = $2`, r.name, v.BookingID).Scan(&last)
		r.violate("booking %d: version %d arrived after version %d", v.BookingID, v.Version, last)
	}
	r.handled.Add(1)
	if r.arrived != nil {
		r.mu.Lock()
		r.arrived[v.BookingID<<8|int64(v.Version)] = time.Now()
		r.mu.Unlock()
	}
	return nil
}

func (r *recorder) check(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, v := range r.violations {
		if i == 10 {
			t.Errorf("… and %d more", len(r.violations)-10)
			break
		}
		t.Errorf("%s: %s", r.name, v)
	}
}

// waitDelivered waits (bounded) until the recorder has seen every
// booking's current version and the tickets consumer has caught up with
// every flight booking, and fails t if that does not happen.
func (e *env) waitDelivered(t testing.TB, recorder string, within time.Duration) {
	t.Helper()
	var behindSeen, behindTickets int
	caughtUp := func() bool {
		err := e.pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM booking b LEFT JOIN test_seen s ON s.booking_id = b.id AND s.consumer = $1
			 WHERE coalesce(s.version, 0) <> b.version),
			(SELECT count(*) FROM booking b LEFT JOIN ticket_booking tb ON tb.booking_id = b.id
			 WHERE b.kind = 'flight' AND coalesce(tb.version, 0) <> b.version)`, recorder).Scan(&behindSeen, &behindTickets)
		if err != nil {
			t.Fatal(err)
		}
		return behindSeen == 0 && behindTickets == 0
	}
	if !caughtUp() {
		apptest.Eventually(t, within, fmt.Sprintf("bookings' changes have not all reached %s and the tickets consumer", recorder), caughtUp)
	}
}

// checkTickets checks every booking's tickets: one per seat or unit, issued
// while CONFIRMED, void once a confirmed booking is cancelled, none for a
// booking never confirmed, never more; and runs the audit.
func (e *env) checkTickets(t testing.TB) {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT b.id, b.status, b.quantity, coalesce(b.seats, '{}'),
			EXISTS (SELECT 1 FROM outbox o WHERE o.booking_id = b.id AND o.type = 'booking.confirmed'),
			count(t.*) FILTER (WHERE t.status = 'ISSUED'), count(t.*) FILTER (WHERE t.status = 'VOID'),
			coalesce(array_agg(t.seat_no ORDER BY t.unit) FILTER (WHERE t.seat_no IS NOT NULL), '{}')
		FROM booking b LEFT JOIN ticket t ON t.booking_id = b.id GROUP BY b.id ORDER BY b.id`)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	var status string
	var qty, issued, void int
	var wasConfirmed bool
	var seats, ticketSeats []string
	bad := 0
	_, err = pgx.ForEachRow(rows, []any{&id, &status, &qty, &seats, &wasConfirmed, &issued, &void, &ticketSeats}, func() error {
		want := [2]int{}
		switch {
		case status == "CONFIRMED":
			want = [2]int{qty, 0}
		case wasConfirmed:
			want = [2]int{0, qty}
		}
		if [2]int{issued, void} != want || fmt.Sprint(ticketSeats) != fmt.Sprint(seatsIf(seats, issued+void > 0)) {
			bad++
			if bad <= 10 {
				t.Errorf("booking %d %s qty %d seats %v: %d issued %d void tickets for seats %v, want %v", id, status, qty, seats, issued, void, ticketSeats, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	results, err := audit.Run(context.Background(), e.pool, audit.Options{Now: e.clock.Now(), SweepInterval: 30 * time.Second, ConsumerLag: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if audit.Failed(results) {
		t.Errorf("audit:\n%s", audit.Format(results))
	}
}

func seatsIf(seats []string, any bool) []string {
	if !any {
		return []string{}
	}
	return seats
}

// eventually waits (bounded) for cond, failing t with what if it never holds.
func (e *env) parked(t testing.TB) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM consumer_parked`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) dispatcher(reg prometheus.Registerer) *events.Dispatcher {
	return &events.Dispatcher{DB: e.pool, Clock: e.clock, Log: e.log, Metrics: events.NewMetrics(reg), Attempts: 2, Workers: 8}
}

// metric sums the samples of the counter or gauge name in reg whose labels
// include the given consumer ("" for any).
func metric(t testing.TB, reg *prometheus.Registry, name, consumer string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := consumer == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" && l.GetValue() == consumer {
					ok = true
				}
			}
			if ok {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
