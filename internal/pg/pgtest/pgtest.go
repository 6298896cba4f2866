// Package pgtest gives each test a fresh PostgreSQL database, cloned from a
// template that is migrated once per set of migrations. The server comes
// from BERTH_TEST_DATABASE_URL (any database on it; `make test` sets it, and
// starts a throw-away cluster when none is running), defaulting to
// postgres://postgres@127.0.0.1:5432/postgres.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/pg"
)

const defaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL is the URL of the test server's maintenance database.
func AdminURL() string {
	if u := os.Getenv("BERTH_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return defaultURL
}

// NewURL creates a fresh, migrated database for t, drops it when t ends, and
// returns its URL.
func NewURL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("pgtest: cannot reach the test PostgreSQL at %s (run the tests with `make test`, which starts one, or set BERTH_TEST_DATABASE_URL): %v", redact(AdminURL()), err)
	}
	defer admin.Close(ctx)

	tmpl, err := ensureTemplate(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: template: %v", err)
	}
	name := fmt.Sprintf("berth_t_%d_%s", time.Now().Unix(), randHex(4))
	err = withLock(ctx, admin, func() error {
		_, err := admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+tmpl)
		return err
	})
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
		}
	})
	return withDatabase(AdminURL(), name)
}

// NewPool creates a fresh database for t and returns a pool on it, closed
// when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return Open(t, NewURL(t))
}

// Open returns a pool on the database at url, closed when t ends.
func Open(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pg.Open(context.Background(), url, pg.PoolConfig{MaxConns: 20, AppName: "berth-test"})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Refusing returns a pool whose every connection is refused: it points at
// port 1 of the loopback address, where nothing listens. It is closed when
// t ends.
func Refusing(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/berth?connect_timeout=2")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// ensureTemplate returns the name of the template database for the current
// migrations, creating and migrating it first if needed. The template is
// built under another name and renamed when complete, so a run that dies
// half-way never leaves a broken template behind.
func ensureTemplate(ctx context.Context, admin *pgx.Conn) (string, error) {
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	tmpl := "berth_tmpl_" + sum
	err = withLock(ctx, admin, func() error {
		var exists bool
		if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", tmpl).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		dropStale(ctx, admin)
		building := "berth_build_" + randHex(4)
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+building); err != nil {
			return err
		}
		pool, err := pg.Open(ctx, withDatabase(AdminURL(), building), pg.PoolConfig{MaxConns: 2})
		if err != nil {
			return err
		}
		_, err = pg.Migrate(ctx, pool)
		pool.Close()
		if err != nil {
			_, _ = admin.Exec(ctx, "DROP DATABASE "+building)
			return err
		}
		_, err = admin.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+tmpl)
		return err
	})
	return tmpl, err
}

// dropStale removes databases of earlier runs that died before their
// cleanup: test databases older than a day, and templates of other
// migrations older than a day.
func dropStale(ctx context.Context, admin *pgx.Conn) {
	rows, err := admin.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'berth\_t\_%' OR datname LIKE 'berth\_build\_%'`)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	cutoff := time.Now().Add(-24 * time.Hour).Unix()
	for _, n := range names {
		var ts int64
		if _, err := fmt.Sscanf(n, "berth_t_%d_", &ts); err == nil && ts > cutoff {
			continue
		}
		if strings.HasPrefix(n, "berth_build_") {
			continue // may be another process building right now
		}
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+n+" WITH (FORCE)")
	}
}

// withLock serialises template builds and clones across test processes:
// PostgreSQL refuses to clone a template while another session copies it.
func withLock(ctx context.Context, conn *pgx.Conn, fn func() error) error {
	const key = 0x6265727468 // "berth"
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return err
	}
	defer func() { _, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", key) }()
	return fn()
}

func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(pg.Migrations(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(pg.Migrations(), path)
		if err != nil {
			return err
		}
		h.Write([]byte(path))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:16], err
}

// withDatabase returns the URL base with its database replaced by name.
func withDatabase(base, name string) string {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		panic(fmt.Sprintf("pgtest: BERTH_TEST_DATABASE_URL must be a postgres:// URL, got %q", redact(base)))
	}
	u.Path = "/" + name
	return u.String()
}

func redact(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "(unparseable url)"
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// LockWaiters is how many backends of pool's database wait for a lock now.
func LockWaiters(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// AwaitLockWait waits, up to 10 s, until a backend of pool's database waits
// for a lock: a test's transaction has reached the lock another holds.
func AwaitLockWait(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for LockWaiters(t, pool) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no backend waited for a lock within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
