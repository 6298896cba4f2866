package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
	"berth.dev/berth/internal/policy"
)

func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}

// BenchmarkEverydayHold is the quiet day: one client, holding one seat at a
// time on one flight nobody else buys, over HTTP, closed loop. It reports
// what a hold costs PostgreSQL: commits and rollbacks per hold (from
// pg_stat_database over the run, every transaction of the process counted:
// the hold, the event relay, every consumer, the background work) and
// round trips per hold (every statement or pipelined batch berth sent),
// beside the latency, and, where events run in serve, the p99 of the time
// from an event's commit to a consumer's processing of it (event-p99-ms,
// the upper bound of its berth_consumer_lag_seconds bucket). The modes run
// side by side:
//
//   - keyed: berth, with an Idempotency-Key on every hold, as a client
//     that retries safely sends it;
//   - berth: the defaults (surge layers on, against the test Redis as a
//     sale would run them, not the embedded substitute, whose Lua runs in
//     a fresh interpreter per script; the hold limit on at its default,
//     3 per 15 minutes, each hold by a customer of its own, as on a
//     quiet day; events relayed and consumed in serve, every consumer
//     running);
//   - protect-off: BERTH_PROTECT=off;
//   - no-events: BERTH_PROTECT=off, BERTH_EVENTS_IN_SERVE=false;
//   - plain: the plain per-request transaction (counter, booking,
//     seats) behind a bare net/http handler, the baseline.
//
// Run it with a fixed count so that every mode does the same work:
//
//	./scripts/testenv.sh go test -run '^$' -bench EverydayHold -benchtime 2000x ./internal/app/
//
// With BERTH_EVERYDAY_SQL=<folder> it writes, per mode, every statement
// (and pipelined batch) berth sent with its count and its mean time at the
// client (round trip included): where a hold's time goes besides HTTP, auth and the surge
// layers. BERTH_EVERYDAY_LOG=1 keeps PostgreSQL's statement log of each
// mode in /tmp/everyday.
func BenchmarkEverydayHold(b *testing.B) {
	for _, mode := range []string{"plain", "keyed", "berth", "protect-off", "no-events"} {
		b.Run(mode, func(b *testing.B) {
			url := pgtest.NewURL(b)
			flights := everydayFlights(b, url, b.N)
			// Read before berth starts (its start-up counts in the run,
			// a few transactions): an open connection may hold back its
			// statistics for up to 10 s.
			before := flushedStats(b, url)
			if os.Getenv("BERTH_EVERYDAY_LOG") != "" && b.N > 1 {
				pool := pgtest.Open(b, url)
				if _, err := pool.Exec(context.Background(), `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET log_statement = ''all''', current_database()); EXECUTE format('ALTER DATABASE %I SET log_connections = on', current_database()); EXECUTE format('ALTER DATABASE %I SET log_disconnections = on', current_database()); END $$`); err != nil {
					b.Fatal(err)
				}
				pool.Close()
				defer func() {
					pool := pgtest.Open(b, url)
					var dir string
					_ = pool.QueryRow(context.Background(), `SELECT current_setting('data_directory')`).Scan(&dir)
					pool.Close()
					data, _ := os.ReadFile(dir + "/log")
					_ = os.WriteFile("/tmp/everyday/pg-"+mode+".log", data, 0o644)
				}()
			}
			var target string
			var stop func()
			var reg *prometheus.Registry
			counter := &statementCounter{}
			if mode == "plain" {
				target, stop = startPlain(b, url, counter)
			} else {
				target, reg, stop = startEveryday(b, url, counter, func(c *config.Config) {
					c.Protect = mode == "berth" || mode == "keyed"
					c.Events.InServe = mode != "no-events"
				})
			}
			toks := make([]string, b.N)
			for i := range toks {
				toks[i] = apptest.Token(b, "customer", int64(1000+i), time.Now())
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			counter.n.Store(0)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				f := flights[i/everydaySeatsPerFlight]
				seat := everydaySeat(i % everydaySeatsPerFlight)
				body := fmt.Sprintf(`{"flightId":%d,"fareClass":"ECONOMY","seats":["%s"]}`, f, seat)
				start := time.Now()
				key := ""
				if mode == "keyed" {
					key = fmt.Sprintf("everyday-%d", i)
				}
				status, answer := post(b, client, target+"/bookings", toks[i], key, body)
				lat = append(lat, time.Since(start))
				if status != http.StatusCreated {
					b.Fatalf("hold %d: %d %s", i, status, answer)
				}
			}
			b.StopTimer()
			elapsed := b.Elapsed()
			trips := counter.n.Load()
			if reg != nil && mode != "no-events" {
				b.ReportMetric(eventLagP99(b, reg), "event-p99-ms")
			}
			stop() // closes every connection: PostgreSQL flushes their statistics
			if dir := os.Getenv("BERTH_EVERYDAY_SQL"); dir != "" && b.N > 1 {
				var lines []string
				for q, t := range counter.bySQL {
					lines = append(lines, fmt.Sprintf("%6d %8.3f ms %s", t.n, float64(t.total.Microseconds())/1000/float64(t.n), q))
				}
				slices.Sort(lines)
				_ = os.WriteFile(dir+"/"+mode+".txt", []byte(strings.Join(lines, "\n")+"\n"), 0o644)
			}
			after := flushedStats(b, url)
			slices.Sort(lat)
			n := float64(b.N)
			b.ReportMetric(n/elapsed.Seconds(), "holds/s")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(after.commits-before.commits)/n, "commits/hold")
			b.ReportMetric(float64(after.rollbacks-before.rollbacks)/n, "rollbacks/hold")
			b.ReportMetric(float64(trips)/n, "roundtrips/hold")
			b.ReportMetric(0, "ns/op")
		})
	}
}

const everydaySeatsPerFlight = 60 * 6

// eventLagP99 waits until berth's consumers have taken every event of the
// run (their count of berth_consumer_lag_seconds observations stops
// growing, at most 15 s) and returns the p99 of the time from an event's
// commit to a consumer's processing of it, every consumer together, as
// the upper bound of the histogram bucket it falls in (in ms).
func eventLagP99(b *testing.B, reg *prometheus.Registry) float64 {
	b.Helper()
	read := func() (total uint64, bounds []float64, counts []uint64) {
		for _, m := range gathered(b, reg, "berth_consumer_lag_seconds") {
			h := m.GetHistogram()
			total += h.GetSampleCount()
			for i, bk := range h.GetBucket() {
				if i == len(bounds) {
					bounds, counts = append(bounds, bk.GetUpperBound()), append(counts, 0)
				}
				counts[i] += bk.GetCumulativeCount()
			}
		}
		return total, bounds, counts
	}
	var last uint64
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		total, _, _ := read()
		if total > 0 && total == last {
			break
		}
		last = total
	}
	total, bounds, counts := read()
	if total == 0 {
		b.Fatal("no event reached a consumer")
	}
	for i, c := range counts {
		if float64(c) >= 0.99*float64(total) {
			return bounds[i] * 1000
		}
	}
	return math.Inf(1)
}

// gathered returns the series of reg's metric name (none if it has none).
func gathered(tb testing.TB, reg *prometheus.Registry, name string) []*dto.Metric {
	tb.Helper()
	families, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

func everydaySeat(i int) string { return fmt.Sprintf("%d%c", i/6+1, "ABCDEF"[i%6]) }

// everydayFlights inserts a schedule of everydayScheduleFlights flights
// (more when n holds need more) of 360 seats, each with one ECONOMY class
// in one bucket, directly in the database, analyzes the tables, and
// returns the flights' ids. The holds go to the first flights; the rest
// are there so that the planner sees tables of a real schedule's size:
// a schedule of a handful of flights makes it scan a flight's seats
// where a real one uses the primary key, and both designs would be
// measured on plans no production database runs.
func everydayFlights(b *testing.B, url string, n int) []int64 {
	b.Helper()
	ctx := context.Background()
	pool := pgtest.Open(b, url)
	defer pool.Close()
	rule, _ := json.Marshal(policy.FlightDefault)
	dep := time.Now().Add(7 * 24 * time.Hour)
	count := max(n/everydaySeatsPerFlight+1, everydayScheduleFlights)
	rows, err := pool.Query(ctx, `INSERT INTO flight (code, origin, destination, departure_at, arrival_at, departure_date)
		SELECT 'VN' || (1000 + g), 'SGN', 'HAN', $1::timestamptz + g * interval '1 minute',
			$1::timestamptz + g * interval '1 minute' + interval '2 hours', ($1::timestamptz + g * interval '1 minute')::date
		FROM generate_series(1, $2) AS g ORDER BY g RETURNING id`, dep, count)
	if err != nil {
		b.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		b.Fatal(err)
	}
	slices.Sort(ids)
	if _, err := pool.Exec(ctx, `WITH fare AS (
			INSERT INTO fare_inventory (flight_id, fare_class, price, currency, capacity, refund_rule)
			SELECT id, 'ECONOMY', 1500000, 'VND', $2, $3 FROM unnest($1::bigint[]) AS id
			RETURNING flight_id, fare_class, capacity)
		INSERT INTO fare_bucket (flight_id, fare_class, bucket, quota) SELECT flight_id, fare_class, 0, capacity FROM fare`,
		ids, everydaySeatsPerFlight, rule); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO seat (flight_id, seat_no, fare_class)
		SELECT id, r || l, 'ECONOMY' FROM unnest($1::bigint[]) AS id, generate_series(1, 60) r,
			unnest(string_to_array('ABCDEF', NULL)) l`, ids); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE flight, fare_inventory, fare_bucket, seat`); err != nil {
		b.Fatal(err)
	}
	return ids
}

// everydayScheduleFlights is the least number of flights everydayFlights
// makes: about a week of a mid-sized airline's departures.
const everydayScheduleFlights = 1000

type xactStats struct{ commits, rollbacks int64 }

// flushedStats waits until no connection other than its own is open on
// url's database (a backend flushes its statistics when it ends; an idle
// one may keep them for up to 10 s) and returns the database's transaction
// counters.
func flushedStats(b *testing.B, url string) xactStats {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var s xactStats
	for range 200 {
		var others int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others); err != nil {
			b.Fatal(err)
		}
		if others == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		b.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&s.commits, &s.rollbacks); err != nil {
		b.Fatal(err)
	}
	// The two statements above are transactions of this connection, which
	// has not ended yet: they are not in s.
	return s
}

// statementCounter counts round trips: every statement and every pipelined
// batch sent on a connection.
type statementCounter struct {
	n     atomic.Int64
	mu    sync.Mutex
	bySQL map[string]*sqlTime
}

// sqlTime is how often a statement was sent and its time at the client,
// round trip included.
type sqlTime struct {
	n     int
	total time.Duration
}

type sqlStart struct {
	sql   string
	start time.Time
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if inBatch(ctx) {
		return ctx
	}
	c.n.Add(1)
	if os.Getenv("BERTH_EVERYDAY_SQL") == "" {
		return ctx
	}
	sql := strings.Join(strings.Fields(d.SQL), " ")
	return context.WithValue(ctx, sqlStart{}, sqlStart{sql: sql[:min(70, len(sql))], start: time.Now()})
}

func (c *statementCounter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	c.took(ctx)
}

// took adds the time of the statement or batch ctx started (sqlStart).
func (c *statementCounter) took(ctx context.Context) {
	s, ok := ctx.Value(sqlStart{}).(sqlStart)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bySQL == nil {
		c.bySQL = map[string]*sqlTime{}
	}
	t := c.bySQL[s.sql]
	if t == nil {
		t = &sqlTime{}
		c.bySQL[s.sql] = t
	}
	t.n++
	t.total += time.Since(s.start)
}
func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	ctx = context.WithValue(ctx, batchKey{}, true)
	if os.Getenv("BERTH_EVERYDAY_SQL") == "" {
		return ctx
	}
	var sqls []string
	for _, q := range d.Batch.QueuedQueries {
		sql := strings.Join(strings.Fields(q.SQL), " ")
		sqls = append(sqls, sql[:min(40, len(sql))])
	}
	return context.WithValue(ctx, sqlStart{}, sqlStart{sql: "pipeline: " + strings.Join(sqls, " + "), start: time.Now()})
}
func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *statementCounter) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	c.took(ctx)
}

type batchKey struct{}

func inBatch(ctx context.Context) bool { v, _ := ctx.Value(batchKey{}).(bool); return v }

// startEveryday runs berth on url with the real clock and counter tracing
// its pool, and returns its address and a function that stops it and closes
// its connections.
func startEveryday(b *testing.B, url string, counter *statementCounter, adjust func(*config.Config)) (string, *prometheus.Registry, func()) {
	b.Helper()
	cfg := apptest.TestConfig(url)
	cfg.DBMaxConns = 16
	var prefix string
	cfg.RedisURL, prefix = apptest.SharedRedis(b)
	cfg.HoldLimit = config.Rate{N: 3, Window: 15 * time.Minute}
	adjust(&cfg)
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, app.Options{PoolTracer: counter, RedisPrefix: prefix})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, ln) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			b.Errorf("run: %v", err)
		}
		a.Close()
	}
	b.Cleanup(stop)
	return "http://" + ln.Addr().String(), a.Registry, stop
}

// startPlain serves POST /bookings with the plain per-request hold: one
// transaction that reserves the counter, inserts the booking and takes the
// seats, each a conditional statement whose row count decides.
func startPlain(b *testing.B, url string, counter *statementCounter) (string, func()) {
	b.Helper()
	pool, err := pg.Open(context.Background(), url, pg.PoolConfig{MaxConns: 16, Tracer: counter})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			FlightID  int64    `json:"flightId"`
			FareClass string   `json:"fareClass"`
			Seats     []string `json:"seats"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		slices.Sort(req.Seats)
		id, err := plainHold(r.Context(), pool, req.FlightID, req.FareClass, req.Seats)
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d,"status":"HELD"}`, id)
	}))
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		srv.Close()
		pool.Close()
	}
	b.Cleanup(stop)
	return srv.URL, stop
}

func plainHold(ctx context.Context, pool *pgxpool.Pool, flightID int64, class string, seats []string) (int64, error) {
	var id int64
	err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		n := len(seats)
		tag, err := tx.Exec(ctx, `UPDATE fare_bucket SET held = held + $3
			WHERE flight_id = $1 AND fare_class = $2 AND bucket = 0 AND sold + held + $3 <= quota`, flightID, class, n)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("sold out")
		}
		until := time.Now().Add(10 * time.Minute)
		if err := tx.QueryRow(ctx, `INSERT INTO booking (kind, status, customer_id, amount, currency, hold_expires_at,
				starts_at, refund_rule, flight_id, fare_class, seats, quantity, fare_bucket, created_at, updated_at)
			VALUES ('flight', 'HELD', 7, 1500000 * $4, 'VND', $3, $3, '{}', $1, $2, $5, $4, 0, now(), now()) RETURNING id`,
			flightID, class, until, n, seats).Scan(&id); err != nil {
			return err
		}
		var tag2 pgconn.CommandTag
		tag2, err = tx.Exec(ctx, `UPDATE seat SET status = 'HELD', booking_id = $3, held_until = $4
			WHERE flight_id = $1 AND seat_no = ANY($2) AND (status = 'AVAILABLE' OR (status = 'HELD' AND held_until < now()))`,
			flightID, seats, id, until)
		if err != nil {
			return err
		}
		if int(tag2.RowsAffected()) != n {
			return fmt.Errorf("seat unavailable")
		}
		return nil
	})
	return id, err
}

// post sends body to url with token, and Idempotency-Key key unless "".
func post(b *testing.B, c *http.Client, url, token, key, body string) (int, string) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}
