package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/url"
	"runtime"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/pg"
)

// dbPrefix starts the name of every database the bench creates.
const dbPrefix = "berth_bench_"

// withDatabase returns base with its database replaced by name.
func withDatabase(base, name string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("the database URL must be a postgres:// URL")
	}
	u.Path = "/" + name
	return u.String(), nil
}

// createDatabase creates a fresh database beside the one adminURL names
// and migrates it; it returns the new database's URL.
func createDatabase(ctx context.Context, adminURL, name string) (string, error) {
	dbURL, err := withDatabase(adminURL, name)
	if err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", redact(adminURL), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	pool, err := pg.Open(ctx, dbURL, pg.PoolConfig{MaxConns: 2, AppName: "berth-bench"})
	if err != nil {
		return "", err
	}
	defer pool.Close()
	if _, err := pg.Migrate(ctx, pool); err != nil {
		return "", fmt.Errorf("migrate %s: %w", name, err)
	}
	if err := spreadIDs(ctx, pool); err != nil {
		return "", fmt.Errorf("prepare %s: %w", name, err)
	}
	return dbURL, nil
}

// spreadIDs starts the flight and car ids of a fresh database at a random
// offset. Redis outlives the bench's databases and may be shared by
// several runs at once: keys of the surge layers (seat gates, sold-out
// hints) name flights by id, and two runs whose flights were both
// numbered from 1 would turn each other's customers away.
func spreadIDs(ctx context.Context, pool *pgxpool.Pool) error {
	for _, table := range []string{"flight", "car"} {
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			continue
		}
		// Identity or serial alike: both have a sequence behind the column.
		start := 1_000_000 * (1 + mrand.Int64N(1_000_000))
		if _, err := pool.Exec(ctx, `SELECT setval(pg_get_serial_sequence($1, 'id'), $2, false)`, table, start); err != nil {
			return fmt.Errorf("restart %s ids: %w", table, err)
		}
	}
	return nil
}

// dropDatabase drops a database the bench created. The server may be
// short of connections for a moment (other work shares it), so it tries a
// few times before giving up.
func dropDatabase(adminURL, name string) error {
	var err error
	for attempt := range 5 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * time.Second)
		}
		if err = dropOnce(adminURL, name); err == nil {
			return nil
		}
	}
	return err
}

func dropOnce(adminURL, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(adminURL), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

func redact(u string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return "(unparseable url)"
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// benchDefaults replace berth's defaults where they would measure the load
// generator rather than berth: all load comes from one loopback address,
// and the closed loops reuse their customers, so the per-client request
// limit, the per-address limit and the per-customer hold limit are off
// unless BERTH_* says otherwise.
var benchDefaults = map[string]string{
	"BERTH_HOLD_LIMIT":    "off",
	"BERTH_REQUEST_LIMIT": "off",
	"BERTH_ADDRESS_LIMIT": "off",
}

// childDefaults are benchDefaults and, for a `berth serve` process, its log
// level: warnings and errors, as berth inside the bench logs.
var childDefaults = func() map[string]string {
	m := map[string]string{"BERTH_LOG_LEVEL": "warn"}
	for k, v := range benchDefaults {
		m[k] = v
	}
	return m
}()

// serverConfig returns the settings of the berth under test: berth's
// defaults (but benchDefaults) and whatever BERTH_* settings getenv
// supplies, with the database, fresh secrets, a loopback address and
// protect forced. env is what a `berth serve` process needs in its
// environment besides this process's to get the same settings.
func serverConfig(dbURL, redisURL string, protect bool, getenv func(string) string) (cfg config.Config, env map[string]string, err error) {
	forced := map[string]string{
		"BERTH_DATABASE_URL":   dbURL,
		"BERTH_HTTP_ADDR":      "127.0.0.1:0",
		"BERTH_AUTH_SECRET":    randomHex(32),
		"BERTH_WEBHOOK_SECRET": "whsec_" + base64.StdEncoding.EncodeToString([]byte(randomHex(16))),
		"BERTH_PROTECT":        map[bool]string{true: "on", false: "off"}[protect],
		"BERTH_REDIS_URL":      redisURL,
		// The bench pays through the in-process simulator on loopback.
		"BERTH_PAYSIM":      "on",
		"BERTH_GATEWAY_URL": "",
		"BERTH_PUBLIC_URL":  "", // webhooks and checkout pages at the address berth listens on
	}
	lookup := func(k string) string {
		if v, ok := forced[k]; ok {
			return v
		}
		if getenv != nil {
			if v := getenv(k); v != "" {
				return v
			}
		}
		return childDefaults[k]
	}
	cfg, err = config.Load(nil, lookup)
	if err != nil {
		return cfg, nil, fmt.Errorf("settings of the berth under test: %w", err)
	}
	env = map[string]string{}
	for k := range forced {
		env[k] = lookup(k)
	}
	for k := range childDefaults {
		env[k] = lookup(k)
	}
	return cfg, env, nil
}

// token returns a bearer token for sub with role, valid for a day.
func (s *server) token(role string, sub int64) string {
	t, err := auth.Issue(s.secret, sub, role, time.Now(), 24*time.Hour)
	if err != nil {
		panic(fmt.Sprintf("bench: issue token: %v", err)) // role and sub are the bench's own constants
	}
	return t
}

// tokenBook holds the bearer tokens of customers first, first+1, …,
// signed before a loop starts: a client has its token before it asks, and
// signing is the issuer's work, not the client's. Signed per request, they
// took about a quarter of the load generator's CPU, on the CPUs berth and
// PostgreSQL share with it.
type tokenBook struct {
	srv   *server
	first int64
	toks  []string
}

// maxTokenBook bounds a book (about 200 bytes a token): a longer or faster
// run signs the rest as it goes.
const maxTokenBook = 200_000

// tokenBook signs the tokens of n customers from first (at most
// maxTokenBook), on every CPU.
func (s *server) tokenBook(first int64, n int) *tokenBook {
	n = min(n, maxTokenBook)
	b := &tokenBook{srv: s, first: first, toks: make([]string, n)}
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				b.toks[i] = s.token(auth.Customer, first+int64(i))
			}
		})
	}
	wg.Wait()
	return b
}

// of returns customer first+i's token (signed now past the book's end).
func (b *tokenBook) of(i int64) string {
	if i < int64(len(b.toks)) {
		return b.toks[i]
	}
	return b.srv.token(auth.Customer, b.first+i)
}

// openPool opens a small pool on the mode's database for setup and audit.
func openPool(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	return pg.Open(ctx, dbURL, pg.PoolConfig{MaxConns: 4, AppName: "berth-bench"})
}
