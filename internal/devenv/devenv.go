// Package devenv starts the pieces `berth dev` needs on a developer's
// machine: a private PostgreSQL cluster under a project-local folder, made
// from the installed PostgreSQL binaries, and stable secrets.
package devenv

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a private cluster in Dir.
type Postgres struct {
	Dir   string
	Port  int
	runAs string // user to run the server as when we are root
	bin   string // folder of initdb and pg_ctl
}

// URL is the connection URL of database name.
func (p *Postgres) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.Port, name)
}

// StartPostgres initialises (once) and starts a cluster in dir on port,
// listening on loopback only. PostgreSQL refuses to run as root, so as root
// it runs as the postgres user (or nobody).
func StartPostgres(ctx context.Context, dir string, port int, log io.Writer) (*Postgres, error) {
	bin, err := findPGBin()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	p := &Postgres{Dir: dir, Port: port, bin: bin}
	if os.Geteuid() == 0 {
		p.runAs = "postgres"
		if _, err := user.Lookup("postgres"); err != nil {
			p.runAs = "nobody"
		}
	}
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(log, "dev: creating a private PostgreSQL cluster in %s\n", data)
		if err := os.MkdirAll(data, 0o700); err != nil {
			return nil, err
		}
		if err := p.chown(dir, data); err != nil {
			return nil, err
		}
		if out, err := p.run(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"); err != nil {
			return nil, fmt.Errorf("initdb: %w\n%s", err, out)
		}
	}
	if p.answers() {
		// Only our own cluster may be reused: another checkout's has other
		// data and was made with other secrets.
		if !p.ours() {
			return nil, fmt.Errorf("port %d already has a PostgreSQL that is not the one in %s (another checkout's `make run`?): "+
				"stop it, or give this one another port with --pg-port", port, data)
		}
		fmt.Fprintf(log, "dev: PostgreSQL already running on 127.0.0.1:%d\n", port)
		return p, nil
	}
	opts := fmt.Sprintf("-h 127.0.0.1 -p %d -k %s", port, data)
	if out, err := p.run(ctx, "pg_ctl", "-D", data, "-w", "-t", "60", "-l", filepath.Join(dir, "postgres.log"), "-o", opts, "start"); err != nil {
		return nil, fmt.Errorf("pg_ctl start (see %s): %w\n%s", filepath.Join(dir, "postgres.log"), err, out)
	}
	fmt.Fprintf(log, "dev: PostgreSQL started on 127.0.0.1:%d (data in %s)\n", port, data)
	return p, nil
}

// Stop stops the cluster.
func (p *Postgres) Stop() error {
	_, err := p.run(context.Background(), "pg_ctl", "-D", filepath.Join(p.Dir, "data"), "-m", "fast", "-w", "stop")
	return err
}

// EnsureDatabase creates database name if it does not exist.
func (p *Postgres) EnsureDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	}
	return err
}

// ours reports whether the server on p.Port is the cluster in p.Dir: its
// postmaster.pid names that port (its fourth line) and a live process.
func (p *Postgres) ours() bool {
	b, err := os.ReadFile(filepath.Join(p.Dir, "data", "postmaster.pid"))
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 || strings.TrimSpace(lines[3]) != strconv.Itoa(p.Port) {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	return err == nil && syscall.Kill(pid, 0) == nil
}

// PortFor returns the private PostgreSQL's port for the folder dir: one of
// 600 ports from 54330 picked by the folder's absolute path, so that two
// checkouts on one machine do not meet on one port (and so in one
// database).
func PortFor(dir string) (int, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return 0, err
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(abs))
	return 54330 + int(h.Sum32()%600), nil
}

func (p *Postgres) answers() bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)), time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

func (p *Postgres) run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	path := filepath.Join(p.bin, tool)
	var cmd *exec.Cmd
	if p.runAs != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", p.runAs, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	return cmd.CombinedOutput()
}

func (p *Postgres) chown(paths ...string) error {
	if p.runAs == "" {
		return nil
	}
	u, err := user.Lookup(p.runAs)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, path := range paths {
		if err := os.Chown(path, uid, gid); err != nil {
			return fmt.Errorf("give %s to %s: %w", path, p.runAs, err)
		}
	}
	return nil
}

func findPGBin() (string, error) {
	if path, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(path), nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", errors.New("PostgreSQL's initdb and pg_ctl are not installed: install PostgreSQL 15+ with contrib " +
		"(Debian: apt-get install postgresql postgresql-contrib), or set BERTH_DATABASE_URL")
}

// Secrets are the development secrets, kept in a file so that tokens
// printed by one run stay valid in the next.
type Secrets struct {
	Auth    string `json:"auth"`
	Webhook string `json:"webhook"`
}

// LoadSecrets reads the secrets in path, creating them on first use.
func LoadSecrets(path string) (Secrets, error) {
	var s Secrets
	b, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(b, &s); err == nil && s.Auth != "" && s.Webhook != "" {
			return s, nil
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return s, err
	}
	s.Auth = hex.EncodeToString(key)
	if _, err := rand.Read(key); err != nil {
		return s, err
	}
	s.Webhook = "whsec_" + base64.StdEncoding.EncodeToString(key)
	b, err = json.MarshalIndent(s, "", "  ")
	if err != nil {
		return s, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return s, err
	}
	return s, os.WriteFile(path, b, 0o600)
}
