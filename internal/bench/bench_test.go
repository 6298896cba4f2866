package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/bench"
	"berth.dev/berth/internal/pg/pgtest"
)

// lockedBuffer collects progress lines written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// quick returns a short, gentle run against the test PostgreSQL and Redis
// that keeps its databases, so the test can compare them with the report,
// and drops them when the test ends.
func quick(t *testing.T, scenario, protect string) (bench.Options, *lockedBuffer) {
	t.Helper()
	o := bench.Quick()
	o.Scenario, o.Protect = scenario, protect
	o.DatabaseURL = pgtest.AdminURL()
	o.RedisURL = os.Getenv("BERTH_TEST_REDIS_URL")
	o.Rate, o.SearchRate, o.CarHoldRate = 40, 40, 15
	o.Duration = 2 * time.Second
	o.ClosedDuration = 500 * time.Millisecond
	o.HotClients, o.RejectClients = 4, 4
	o.WaitingRoom = 20 // exercised where this build has a waiting room
	o.Keep = true
	logs := &lockedBuffer{}
	o.Progress, o.ServerLog = logs, logs
	return o, logs
}

// dropAfter drops the databases a kept run created when t ends.
func dropAfter(t *testing.T, rep *bench.Report) {
	t.Cleanup(func() {
		if rep == nil {
			return
		}
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, pgtest.AdminURL())
		if err != nil {
			t.Logf("drop bench databases: %v", err)
			return
		}
		defer conn.Close(ctx)
		for _, m := range rep.Modes {
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{m.Database}.Sanitize()+" WITH (FORCE)"); err != nil {
				t.Logf("drop %s: %v", m.Database, err)
			}
		}
	})
}

func modeDB(t *testing.T, m *bench.Mode) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + m.Database
	return pgtest.Open(t, u.String())
}

// expected outcomes of a hold in the flash sale: anything else means the
// bench sent something wrong or berth broke.
var saleOutcomes = map[string]bool{
	"201": true, "409 seat_unavailable": true, "409 sold_out": true,
	"429 waiting_room": true, "429 rate_limited": true, "503 overloaded": true,
}

func TestFlashSaleBothModes(t *testing.T) {
	t.Parallel()
	o, logs := quick(t, bench.FlashSale, "both")
	rep, err := bench.Run(context.Background(), o)
	dropAfter(t, rep)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, logs)
	}
	if len(rep.Modes) != 2 || rep.Modes[0].Name != "protect=off" || rep.Modes[1].Name != "protect=on" {
		t.Fatalf("modes = %v, want protect=off then protect=on", modeNames(rep))
	}
	want := int(o.Rate * o.Duration.Seconds())
	for _, m := range rep.Modes {
		t.Run(m.Name, func(t *testing.T) {
			hold := m.Open.Op("hold")
			if hold == nil || !hold.Scheduled {
				t.Fatalf("no scheduled hold op in %+v", m.Open.Ops)
			}
			checkAccounting(t, m.Open, map[string]int{"hold": want})
			for _, s := range hold.Outcomes {
				if !saleOutcomes[s.Outcome] && s.Outcome != bench.OutcomeTimeout && s.Outcome != bench.OutcomeUnsent && s.Outcome != bench.OutcomeCutOff {
					t.Errorf("hold answered %q %d times", s.Outcome, s.Count)
				}
			}
			// With the waiting room on, first asks are turned away and
			// the holds succeed on the retry with an admission token.
			held := hold.Count("201")
			if retry := m.Open.Op("hold-retry"); retry != nil {
				held += retry.Count("201")
			}
			if held == 0 {
				t.Errorf("no hold succeeded: %+v", hold.Outcomes)
			}
			checkAudit(t, m)
			checkClosed(t, m)

			// The database agrees with the report: every 201 is a
			// booking, and nothing else is (the payment probe's hold
			// aside). A request that timed out may or may not have
			// committed.
			var bookings int
			if err := modeDB(t, m).QueryRow(context.Background(), `SELECT count(*) FROM booking`).Scan(&bookings); err != nil {
				t.Fatal(err)
			}
			created, unknown := m.Open.Committed+1, 0
			for _, op := range m.Open.Ops {
				unknown += op.Count(bench.OutcomeTimeout) + op.Count(bench.OutcomeTransport) + op.Count(bench.OutcomeCutOff)
			}
			for _, name := range []string{bench.HotFlightOne, bench.HotFlight, bench.HotFlightMore} {
				hot := m.Measurement(name)
				if hot == nil {
					t.Errorf("no %s measurement", name)
					continue
				}
				created += hot.Good
				unknown += hot.Count(bench.OutcomeTimeout) + hot.Count(bench.OutcomeTransport)
				// The database's work per hold is measured: berth counts its
				// round trips itself (a coalesced batch is one for many
				// holds, so below one is possible); the commits are read
				// without a settle here, and PostgreSQL may not have reported
				// any of them yet (a hold is one autocommit statement now).
				if hot.DB == nil || hot.DB.CommitsPerHold < 0 || hot.DB.RoundTripsPerHold <= 0 {
					t.Errorf("%s: database work per hold %+v", name, hot.DB)
				}
			}
			if bookings < created || bookings > created+unknown {
				t.Errorf("database has %d bookings, the report counts %d holds answered 201 (+1 probe) and %d unanswered", bookings, created, unknown)
			}
			if f := m.Features["payments"]; f != "on" && !strings.HasPrefix(f, "unavailable") {
				t.Errorf("payments feature = %q", f)
			}
			if f := m.Features["payments"]; f == "on" && hold.Count("201") > 5 {
				if pay := m.Open.Op("pay"); pay == nil || pay.Answered == 0 {
					t.Errorf("payments are on but no customer paid")
				}
			}
			checkMemory(t, m, 1)
			if m.Money == nil || m.Money.WebhookError != "" {
				t.Errorf("money lane %+v, want the webhooks counted", m.Money)
			} else if m.Features["payments"] == "on" && m.Money.PayStarts > 0 && m.Money.Webhooks == 0 {
				t.Errorf("money lane %+v: payments started but no webhook counted", m.Money)
			}
		})
	}
	if rep.Modes[0].Features["waitingRoom"] != "off (bare design)" {
		t.Errorf("bare mode waiting room = %q", rep.Modes[0].Features["waitingRoom"])
	}
	checkOutputs(t, rep, logs)
}

// TestCarPeakBothModes runs the car peak with two berths in the test's
// process sharing the load (the database and Redis are shared).
func TestCarPeakBothModes(t *testing.T) {
	t.Parallel()
	o, logs := quick(t, bench.CarPeak, "both")
	o.NoClosed = true
	o.Processes = []int{2}
	rep, err := bench.Run(context.Background(), o)
	dropAfter(t, rep)
	if errors.Is(err, bench.ErrUnavailable) {
		t.Skipf("this build has no car API yet: %v", err)
	}
	if err != nil {
		t.Fatalf("run: %v\n%s", err, logs)
	}
	for _, m := range rep.Modes {
		t.Run(m.Name, func(t *testing.T) {
			checkAccounting(t, m.Open, map[string]int{
				"search":          int(o.SearchRate * o.Duration.Seconds()),
				"car-hold":        int(o.CarHoldRate * o.Duration.Seconds()),
				"search-uncached": int(o.UncachedSearchRate * o.Duration.Seconds()),
			})
			if n := m.Open.Op("search").Count("200"); n == 0 {
				t.Errorf("no search answered 200: %+v", m.Open.Op("search").Outcomes)
			}
			if n := m.Open.Op("car-hold").Count("201"); n == 0 {
				t.Errorf("no car hold answered 201: %+v", m.Open.Op("car-hold").Outcomes)
			}
			if n := m.Open.Op("search-uncached").Count("200"); n == 0 {
				t.Errorf("no uncached search answered 200: %+v", m.Open.Op("search-uncached"))
			}
			if m.Processes != 2 || !strings.HasSuffix(m.Name, " x2") {
				t.Errorf("mode %q ran %d processes, want 2", m.Name, m.Processes)
			}
			checkMemory(t, m, 2)
			checkAudit(t, m)
		})
	}
	checkOutputs(t, rep, logs)
}

// TestInjectedOversellFailsTheRun corrupts the database the way an
// oversell would look — a second live booking for a seat already held,
// counters that no longer match — and expects the run to fail loudly.
func TestInjectedOversellFailsTheRun(t *testing.T) {
	t.Parallel()
	o, logs := quick(t, bench.FlashSale, "off")
	o.NoClosed = true
	o.Duration = time.Second
	o.BeforeAudit = func(ctx context.Context, pool *pgxpool.Pool) error {
		// Copy a seat hold whole, whatever columns the booking has, as a
		// second customer's live booking of the same seats.
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `CREATE TEMP TABLE twin ON COMMIT DROP AS
				SELECT * FROM booking WHERE status = 'HELD' AND cardinality(seats) > 0 ORDER BY id LIMIT 1`)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return errors.New("no seat hold to double: the scenario held no seats")
			}
			if _, err := tx.Exec(ctx, `UPDATE twin SET id = nextval(pg_get_serial_sequence('booking', 'id')), customer_id = customer_id + 1`); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO booking OVERRIDING SYSTEM VALUE SELECT * FROM twin`)
			return err
		})
	}
	rep, err := bench.Run(context.Background(), o)
	dropAfter(t, rep)
	var failed *bench.FailedError
	if !errors.As(err, &failed) {
		t.Fatalf("run with an oversell: err = %v, want a FailedError\n%s", err, logs)
	}
	m := rep.Modes[0]
	if !m.Audit.Ran || m.Audit.OK {
		t.Fatalf("audit ran=%v ok=%v, want a failed audit (%s)", m.Audit.Ran, m.Audit.OK, m.Audit.Error)
	}
	msg := err.Error()
	for _, want := range []string{"I1", "I2", "VIOLATED", "protect=off"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure message does not name %q:\n%s", want, msg)
		}
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	if !strings.Contains(table.String(), "FAILED") || strings.Contains(table.String(), "PASSED") {
		t.Errorf("table does not say FAILED:\n%s", table.String())
	}
}

// checkAccounting checks that every scheduled request has exactly one
// outcome, in the totals and in the per-second series.
func checkAccounting(t *testing.T, o *bench.OpenResult, scheduled map[string]int) {
	t.Helper()
	if o == nil {
		t.Fatal("no open-loop result")
	}
	seriesOffered, seriesAnswered := map[string]int{}, map[string]int{}
	for _, s := range o.Series {
		for op, n := range s.Offered {
			seriesOffered[op] += n
		}
		for key, st := range s.Outcomes {
			op, _, _ := strings.Cut(key, " ")
			seriesAnswered[op] += st.Count
		}
	}
	total := 0
	for name, want := range scheduled {
		op := o.Op(name)
		if op == nil {
			t.Errorf("no op %q", name)
			continue
		}
		sum := 0
		for _, s := range op.Outcomes {
			sum += s.Count
		}
		if op.Offered != want || op.Answered != want || sum != want {
			t.Errorf("%s: offered %d, answered %d, outcomes sum %d; want %d each", name, op.Offered, op.Answered, sum, want)
		}
		if seriesOffered[name] != want || seriesAnswered[name] != want {
			t.Errorf("%s: series offered %d, answered %d; want %d", name, seriesOffered[name], seriesAnswered[name], want)
		}
		total += want
	}
	if o.Offered != total || o.Answered != total {
		t.Errorf("open loop offered %d answered %d, want %d", o.Offered, o.Answered, total)
	}
	if len(o.Series) < 2 {
		t.Errorf("series has %d seconds", len(o.Series))
	}
}

func checkAudit(t *testing.T, m *bench.Mode) {
	t.Helper()
	if !m.Audit.Ran || !m.Audit.OK {
		t.Fatalf("audit ran=%v ok=%v err=%q results=%+v", m.Audit.Ran, m.Audit.OK, m.Audit.Error, m.Audit.Results)
	}
	ids := map[string]bool{}
	for _, r := range m.Audit.Results {
		ids[r.ID] = true
	}
	if !ids["I1"] || !ids["I2"] {
		t.Errorf("audit checked %v, want I1 and I2 at least", ids)
	}
}

func checkClosed(t *testing.T, m *bench.Mode) {
	t.Helper()
	for _, name := range []string{bench.HotFlightOne, bench.HotFlight, bench.HotFlightMore, bench.BareNetHTTP, bench.RejectSoldOut, bench.RejectWaitingRoom} {
		c := m.Measurement(name)
		if c == nil {
			t.Errorf("no %s measurement", name)
			continue
		}
		if c.Skipped != "" {
			if name != bench.RejectWaitingRoom {
				t.Errorf("%s skipped: %s", name, c.Skipped)
			}
			continue
		}
		sum := 0
		for _, s := range c.Outcomes {
			sum += s.Count
		}
		if c.Requests == 0 || sum != c.Requests || c.Good == 0 || c.Good != c.Count(c.GoodOutcome) {
			t.Errorf("%s: %d requests, outcomes sum %d, %d good (%s): %+v", name, c.Requests, sum, c.Good, c.GoodOutcome, c.Outcomes)
		}
	}
	if bare := m.Measurement(bench.BareNetHTTP); bare != nil && bare.Good != bare.Requests {
		t.Errorf("the bare handler answered something else than its 409: %+v", bare.Outcomes)
	}
	if hot := m.Measurement(bench.HotFlight); hot != nil {
		for _, s := range hot.Outcomes {
			if s.Outcome != "201" && s.Outcome != "503 overloaded" && s.Outcome != "429 rate_limited" {
				t.Errorf("hot flight: %d answers %q (every attempt asks for seats of its own)", s.Count, s.Outcome)
			}
		}
	}
}

var externalRef = regexp.MustCompile(`(?i)<(script|link|img|iframe)\b|\b(src|href)\s*=|url\(`)

// checkOutputs checks the JSON file, the HTML page, the table and the
// progress lines.
func checkOutputs(t *testing.T, rep *bench.Report, logs *lockedBuffer) {
	t.Helper()
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Scenario string `json:"scenario"`
		Modes    []struct {
			Name  string `json:"name"`
			Audit struct {
				Ran bool `json:"ran"`
			} `json:"audit"`
			Open struct {
				Offered int `json:"offered"`
				Series  []struct {
					T        int                        `json:"t"`
					Outcomes map[string]json.RawMessage `json:"outcomes"`
				} `json:"series"`
			} `json:"open"`
		} `json:"modes"`
		Targets  []json.RawMessage `json:"targets"`
		Failures []string          `json:"failures"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	if back.Scenario != rep.Scenario || len(back.Modes) != len(rep.Modes) || len(back.Targets) == 0 || back.Failures == nil {
		t.Errorf("JSON report lacks parts: %.300s", js.String())
	}
	for _, m := range back.Modes {
		if !m.Audit.Ran || m.Open.Offered == 0 || len(m.Open.Series) == 0 {
			t.Errorf("JSON mode %s: audit ran %v, offered %d, %d seconds", m.Name, m.Audit.Ran, m.Open.Offered, len(m.Open.Series))
		}
	}

	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	if n := strings.Count(html, "<svg xmlns"); n < 2*len(rep.Modes) {
		t.Errorf("HTML has %d charts, want 2 per mode", n)
	}
	for _, m := range rep.Modes {
		if !strings.Contains(html, m.Name) {
			t.Errorf("HTML does not mention %s", m.Name)
		}
	}
	if loc := externalRef.FindStringIndex(html); loc != nil {
		t.Errorf("HTML loads something from outside: %q", html[max(loc[0]-40, 0):min(loc[1]+40, len(html))])
	}

	var table bytes.Buffer
	rep.WriteTable(&table)
	for _, want := range []string{"OPEN LOOP", "AUDIT", "PASSED", "p99", "P99 OF ALL ANSWERS PER SECOND", "MEMORY", "load average"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if !regexp.MustCompile(`protect=\w+( x\d)? +\d+s +offered +\d+/s +answered`).MatchString(logs.String()) {
		t.Errorf("no progress line in:\n%s", logs)
	}
}

func modeNames(r *bench.Report) []string {
	var out []string
	for _, m := range r.Modes {
		out = append(out, m.Name)
	}
	return out
}

// checkMemory: each berth process's memory was sampled over the mode.
func checkMemory(t *testing.T, m *bench.Mode, procs int) {
	t.Helper()
	if len(m.Memory) != procs {
		t.Fatalf("memory of %d processes, want %d: %+v", len(m.Memory), procs, m.Memory)
	}
	for _, p := range m.Memory {
		if p.Samples < 2 || p.StartKB <= 0 || p.MaxKB < p.StartKB || p.MaxKB < p.EndKB || len(p.PerSecondKB) == 0 {
			t.Errorf("memory %+v: want at least two samples, start ≤ max ≥ end, a series per second", p)
		}
	}
}
