package app_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/pg/pgtest"
)

// app.New closes everything it opened when a later step fails: the
// database pool, the read pool and Redis. Each case opens the pools (with
// idle connections kept, so that a leaked pool shows as backends) and,
// where it gets that far, Redis under a client name of its own, then makes
// one step fail; afterwards the test database has no backends and Redis no
// client of that name.
func TestNewClosesWhatItOpenedOnFailure(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// set makes the step fail; url is the test database's.
		set func(t *testing.T, cfg *config.Config, url string)
	}{
		{"migration fails", func(t *testing.T, cfg *config.Config, url string) {
			// Every migration, forgotten, is applied again: the first fails.
			exec(t, url, `DELETE FROM goose_db_version WHERE version_id > 0`)
			cfg.Migrate = true
		}},
		{"the schema is older than the binary", func(t *testing.T, _ *config.Config, url string) {
			exec(t, url, `DELETE FROM goose_db_version WHERE version_id = (SELECT max(version_id) FROM goose_db_version)`)
		}},
		{"read pool cannot be opened", func(_ *testing.T, cfg *config.Config, _ string) {
			cfg.DatabaseReadURL = "postgres://%zz"
		}},
		{"bad Redis URL after the pools opened", func(_ *testing.T, cfg *config.Config, url string) {
			cfg.DatabaseReadURL = url
			cfg.Protect, cfg.RedisURL = true, "not-redis://127.0.0.1:1"
		}},
		{"payments fail after Redis opened", func(_ *testing.T, cfg *config.Config, url string) {
			cfg.DatabaseReadURL = url
			cfg.WebhookSecret = "not-a-secret"
		}},
		{"events fail after payments", func(_ *testing.T, cfg *config.Config, url string) {
			cfg.DatabaseReadURL = url
			cfg.Events.NotifyURL, cfg.Events.HookSecret = "http://127.0.0.1:1/notify", "not-a-secret"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewURL(t)
			redisName := "berth-close-test-" + randomHex()
			cfg := apptest.TestConfig(url)
			cfg.DBMinConns = 2
			cfg.Protect = true
			cfg.RedisURL = withClientName(apptest.RedisURL(), redisName)
			c.set(t, &cfg, url)
			a, err := app.New(context.Background(), cfg, app.Options{Log: slog.New(slog.DiscardHandler)})
			if err == nil {
				a.Close()
				t.Fatal("New succeeded, want an error")
			}
			t.Logf("New: %v", err)
			apptest.Eventually(t, 10*time.Second, "the test database's backends all closed", func() bool {
				return backends(t, url) == 0
			})
			apptest.Eventually(t, 10*time.Second, "berth's Redis connections all closed", func() bool {
				return redisClients(t, redisName) == 0
			})
		})
	}
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func withClientName(url, name string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "client_name=" + name
}

func exec(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
}

// backends counts the sessions open on the database at url, from the
// maintenance database.
func backends(t *testing.T, url string) int {
	t.Helper()
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(ctx) }()
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, pc.Database).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// redisClients counts the test Redis's connections named name.
func redisClients(t *testing.T, name string) int {
	t.Helper()
	opt, err := redis.ParseURL(apptest.RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(list, " name="+name+" ")
}
