package app_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/app/apptest"
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
	if !strings.Contains(info, "number_of_cached_scripts:7\r\n") {
		t.Errorf("the surge layers' 7 scripts are not all in Redis's cache before the first request: %s", cachedScripts(info))
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
