package app_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/pg/pgtest"
	"berth.dev/berth/internal/testsvc"
)

// Before berth serves anything (app.New has returned; no request has
// come), its database pool already holds its minimum connections, and the
// surge layers' scripts are in Redis's cache: a
// sale's first second does not wait for connections to be made nor for
// scripts to be sent.
func TestPoolsAreWarmBeforeTheFirstRequest(t *testing.T) {
	t.Parallel()
	rdb := testsvc.StartRedis(t) // a Redis of its own: no other test's scripts in its cache
	cfg := apptest.TestConfig(pgtest.NewURL(t))
	cfg.DBMaxConns, cfg.DBMinConns = 10, 6
	cfg.RedisURL = rdb.URL()
	cfg.Events.InServe = false
	ctx := context.Background()
	a, err := app.New(ctx, cfg, app.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// Idle: made and waiting (TotalConns counts the ones being made, too).
	// Redis's connections are counted by OpenRedis's own test.
	if n := a.Pool.Stat().IdleConns(); n < 6 {
		t.Errorf("database connections made before the first request: %d, want BERTH_DB_MIN_CONNS 6", n)
	}
	opt, err := redis.ParseURL(rdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer func() { _ = c.Close() }()
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The layers' own 7 scripts and go-redis/redis_rate's 2 (the request
	// limits).
	if !strings.Contains(info, "number_of_cached_scripts:9\r\n") {
		t.Errorf("the surge layers' 9 scripts are not all in Redis's cache before the first request: %s", cachedScripts(info))
	}
}

// cachedScripts picks the script count out of INFO memory.
func cachedScripts(info string) string {
	for line := range strings.Lines(info) {
		if strings.HasPrefix(line, "number_of_cached_scripts:") {
			return strings.TrimSpace(line)
		}
	}
	return "number_of_cached_scripts missing"
}

// Every connection of berth's pool has run the hold path and a car search
// once before it serves a request, and nothing of it stayed: made when berth starts on a
// database that has flights, at once (app.New returns with them warm);
// made before there was any flight to hold on, by the Warmer's pass once
// there is one.
func TestConnectionsHaveRunTheHoldBeforeServing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)

	// Started on an empty database: its connections could not be warmed.
	s := apptest.Start(t, apptest.Options{DatabaseURL: url, Config: func(c *config.Config) { c.DBMinConns, c.Events.InServe = 3, false }})
	if warm, _ := s.App.Warmer.Counts(); warm != 0 {
		t.Fatalf("%d connections warm with no flight to hold on", warm)
	}
	fl := s.Admin().CreateFlight(t, apptest.Flight{DepartureAt: apptest.Epoch.Add(48 * time.Hour),
		Fares: []apptest.Fare{{Class: "ECONOMY", Price: 1_000_000, Seats: []string{"1A", "1B", "1C"}}}})
	passUntilWarm(s.App)
	checkWarm(t, "after the pass, berth started before the flight existed", s.App, 3, "%hold_flight(%")

	// Started on a database with a flight: warm when New returns.
	cfg := apptest.TestConfig(url)
	cfg.DBMaxConns, cfg.DBMinConns = 10, 6
	cfg.Events.InServe = false
	a, err := app.New(ctx, cfg, app.Options{Clock: s.Clock})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	checkWarm(t, "when app.New returned", a, 6, "%hold_flight(%")

	// Nothing was held: every seat is free and no booking or event exists.
	var bookings, events, free, keys int
	if err := a.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM booking), (SELECT count(*) FROM outbox),
		(SELECT count(*) FROM seat WHERE flight_id = $1 AND status = 'AVAILABLE' AND booking_id IS NULL),
		(SELECT count(*) FROM idempotency_key WHERE caller_id = 0)`, fl.ID).
		Scan(&bookings, &events, &free, &keys); err != nil {
		t.Fatal(err)
	}
	if bookings != 0 || events != 0 || free != 3 || keys != 0 {
		t.Errorf("after the warm-ups: %d bookings, %d events, %d of 3 seats free, %d warm-up keys; want 0, 0, 3, 0",
			bookings, events, free, keys)
	}
	s.Customer(7).HoldSeats(t, fl.ID, "ECONOMY", "1A") // and the seat it warmed on can be held
}

// A database that sells only cars: every connection runs a car hold once
// (hold_car) before it is counted warm, and nothing of it stays.
func TestConnectionsHaveRunTheCarHoldWhereThereAreOnlyCars(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) { c.DBMinConns, c.Events.InServe = 3, false }})
	if warm, _ := s.App.Warmer.Counts(); warm != 0 {
		t.Fatalf("%d connections warm with nothing to hold", warm)
	}
	car := s.Host(40).CreateCar(t, apptest.Car{Plate: "30A-123.45", Model: "VinFast VF 8", City: "HN",
		DailyPrice: 1_000_000, Deposit: 5_000_000, Currency: "VND", Turnaround: "1h"})
	passUntilWarm(s.App)
	checkWarm(t, "after the pass, berth started before the car existed", s.App, 3, "%hold_car(%")

	var bookings, events, keys int
	if err := s.App.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM booking),
		(SELECT count(*) FROM outbox WHERE type LIKE 'booking.%'), (SELECT count(*) FROM idempotency_key WHERE caller_id = 0)`).
		Scan(&bookings, &events, &keys); err != nil {
		t.Fatal(err)
	}
	if bookings != 0 || events != 0 || keys != 0 {
		t.Errorf("after the warm-ups: %d bookings, %d booking events and %d warm-up keys, want none", bookings, events, keys)
	}
	from := apptest.Epoch.Add(72 * time.Hour)
	s.Customer(7).HoldCar(t, car.ID, from, from.Add(24*time.Hour)) // and the car it warmed on can be held
}

// passUntilWarm runs the Warmer's pass on a's pool until it counts no
// connection cold, at most 50 times: a pass skips the connections in use
// (the waiting room's reloads), so a few passes find them idle. checkWarm
// then tells whether they were warmed.
func passUntilWarm(a *app.App) {
	for range 50 {
		if a.Warmer.Pass(context.Background(), a.Pool); func() bool { _, cold := a.Warmer.Counts(); return cold == 0 }() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkWarm asserts that a's pool holds at least n idle connections, each
// of which has run the statement like hold (a hold's), the car calendar
// load's and those of a hold's Idempotency-Key (pgx prepares a statement
// on a connection the first time it runs there), and that the Warmer
// counts none cold. It holds the idle connections for one query each: a
// connection the pool makes meanwhile, for berth's background work, is
// cold until the Warmer's next pass.
func checkWarm(t *testing.T, when string, a *app.App, n int, hold string) {
	t.Helper()
	ctx := context.Background()
	statements := map[string]string{
		hold:                                          "the hold",
		"%FROM car c JOIN booking b%":                 "the car calendar load",
		"INSERT INTO idempotency_key%unnest(%":        "the claim of a pending key",
		"SELECT method, path, request_hash%":          "its read",
		"UPDATE idempotency_key%SET response_status%": "its answer",
		"INSERT INTO idempotency_key%response_headers, response_body%": "a new key's answer",
		"INSERT INTO idempotency_key AS k%":                            "the Idempotency-Key's claim",
	}
	likes := slices.Collect(maps.Keys(statements))
	warm, cold := a.Warmer.Counts()
	conns := a.Pool.AcquireAllIdle(ctx)
	missing := make([][]string, len(conns))
	for i, c := range conns {
		rows, err := c.Query(ctx, `SELECT l FROM unnest($1::text[]) AS l
			WHERE NOT EXISTS (SELECT FROM pg_prepared_statements WHERE statement LIKE l
				AND statement NOT LIKE '%pg_prepared_statements%')`, likes)
		if err == nil {
			missing[i], err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		c.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(conns) < n {
		t.Errorf("%s: %d idle connections, want %d", when, len(conns), n)
	}
	for i, m := range missing {
		for _, like := range m {
			t.Errorf("%s: connection %d of %d has never run %s", when, i+1, len(conns), statements[like])
		}
	}
	if cold != 0 || warm < n {
		t.Errorf("%s: the Warmer counts %d warm and %d cold connections, want %d warm and none cold", when, warm, cold, n)
	}
}
