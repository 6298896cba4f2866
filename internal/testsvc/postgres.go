// Package testsvc starts throw-away PostgreSQL clusters, streaming
// replicas and Redis servers from the installed binaries, for tests that
// must stop, kill or lag a dependency: the shared servers of `make test`
// must never be touched that way. Everything listens on loopback only and
// is removed when the test ends.
//
// PostgreSQL refuses to run as root; when the tests do, its tools run as
// the postgres user (runuser), and the data folders are made theirs.
package testsvc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a throw-away PostgreSQL server: a primary, or a streaming
// replica of one.
type Postgres struct {
	// Port is the server's port on 127.0.0.1; it stays the same across
	// Stop and Start.
	Port int
	dir  string // the data folder
	opts PostgresOptions

	mu      sync.Mutex
	running bool
}

// PostgresOptions tune a throw-away server.
type PostgresOptions struct {
	// MaxConnections is max_connections (default 200).
	MaxConnections int
	// Durable keeps fsync and synchronous commit on. By default they are
	// off, for speed: then a stop with -m immediate (a crash) can lose the
	// last commits the server had already acknowledged, since
	// synchronous_commit=off answers before the WAL is written. Tests that
	// hold berth's answers against the database after a crash (the fault
	// suite) need Durable.
	Durable bool
	// Settings are more -c name=value server settings.
	Settings map[string]string
}

// StartPostgres initialises and starts a throw-away cluster, stopped and
// removed when t ends. It fails t with what to install when the server
// binaries are missing.
func StartPostgres(t testing.TB, o PostgresOptions) *Postgres {
	t.Helper()
	if o.MaxConnections == 0 {
		o.MaxConnections = 200
	}
	initdb := Bin(t, "initdb")
	p := &Postgres{Port: FreePort(t), dir: dataDir(t, "pg"), opts: o}
	pgRun(t, initdb, "-D", p.dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	t.Cleanup(func() { stopAtCleanup(t, p) })
	p.Start(t)
	return p
}

// StartReplica makes a streaming replica of p with pg_basebackup -R and
// starts it, read-only, on a port of its own; it is stopped and removed
// when t ends.
func (p *Postgres) StartReplica(t testing.TB) *Postgres {
	t.Helper()
	r := &Postgres{Port: FreePort(t), dir: dataDir(t, "replica"), opts: p.opts}
	pgRun(t, Bin(t, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-U", "postgres",
		"-D", r.dir, "-R", "-X", "stream", "-c", "fast", "--no-sync")
	t.Cleanup(func() { stopAtCleanup(t, r) })
	r.Start(t)
	return r
}

// URL returns the URL of database db on p.
func (p *Postgres) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.Port, db)
}

// Start starts the server (again, after Stop) and waits until it accepts
// connections.
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return
	}
	settings := []string{
		"-h 127.0.0.1", "-p " + strconv.Itoa(p.Port), "-k " + p.dir,
		"-c max_connections=" + strconv.Itoa(p.opts.MaxConnections),
	}
	if !p.opts.Durable {
		settings = append(settings, "-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off")
	}
	for k, v := range p.opts.Settings {
		settings = append(settings, "-c "+k+"="+v)
	}
	pgRun(t, Bin(t, "pg_ctl"), "-D", p.dir, "-w", "-t", "60", "-l", filepath.Join(p.dir, "server.log"),
		"-o", strings.Join(settings, " "), "start")
	p.running = true
}

// Stop stops the server: mode "immediate" is a crash (no shutdown
// checkpoint, connections cut), "fast" a clean shutdown.
func (p *Postgres) Stop(t testing.TB, mode string) {
	t.Helper()
	if err := p.stop(mode); err != nil {
		t.Fatalf("testsvc: stop PostgreSQL on port %d: %v", p.Port, err)
	}
}

// stopAtCleanup stops p when its test ends; a server that will not stop is
// reported, since it would hold its port and data directory.
func stopAtCleanup(t testing.TB, p *Postgres) {
	if err := p.stop("immediate"); err != nil {
		t.Errorf("testsvc: %v", err)
	}
}

func (p *Postgres) stop(mode string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return nil
	}
	ctl, err := findBin("pg_ctl")
	if err != nil {
		return err
	}
	if out, err := pgCmd(ctl, "-D", p.dir, "-m", mode, "-w", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop: %w: %s", err, out)
	}
	p.running = false
	return nil
}

// Log returns the server's log so far (for a failing test's message).
func (p *Postgres) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
	return string(b)
}

// CreateDatabase creates database name on p and returns its URL.
func (p *Postgres) CreateDatabase(t testing.TB, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		t.Fatalf("testsvc: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testsvc: create database %s: %v", name, err)
	}
	return p.URL(name)
}

// Bin returns the path of a PostgreSQL server program, from PATH or the
// usual install folders, or fails t saying what to install.
func Bin(t testing.TB, name string) string {
	t.Helper()
	path, err := findBin(name)
	if err != nil {
		t.Fatalf("testsvc: %v", err)
	}
	return path
}

func findBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	dirs = append(dirs, "/usr/local/pgsql/bin", "/opt/homebrew/bin")
	for i := len(dirs) - 1; i >= 0; i-- { // the newest version first
		p := filepath.Join(dirs[i], name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not installed: install the PostgreSQL 15+ server (Debian: apt-get install postgresql postgresql-contrib)", name)
}

// pgRun runs a PostgreSQL tool, as the postgres user when the test runs as
// root, and fails t with its output.
func pgRun(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := pgCmd(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("testsvc: %s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
}

func pgCmd(name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

// dataDir returns a fresh folder for a server's data, owned by the user
// the server runs as, removed when t ends.
func dataDir(t testing.TB, name string) string {
	t.Helper()
	base, err := os.MkdirTemp("", "berth-testsvc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	dir := filepath.Join(base, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// The postgres user must reach the folder and own the data.
		if err := os.Chmod(base, 0o755); err != nil {
			t.Fatal(err)
		}
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("testsvc: tests run as root, and PostgreSQL needs a postgres user to run as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// WaitReachable waits up to d for something to accept TCP connections at
// addr.
func WaitReachable(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("nothing accepts connections at %s after %s", addr, d), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
