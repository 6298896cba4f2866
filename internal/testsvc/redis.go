package testsvc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Redis is a throw-away Redis server on 127.0.0.1, keeping nothing on disk.
type Redis struct {
	// Port stays the same across Kill and Start.
	Port int
	dir  string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartRedis starts a throw-away Redis, killed when t ends. It fails t
// saying what to install when redis-server is missing.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	dir, err := os.MkdirTemp("", "berth-testsvc-redis-")
	if err != nil {
		t.Fatal(err)
	}
	r := &Redis{Port: FreePort(t), dir: dir}
	t.Cleanup(func() {
		r.kill()
		_ = os.RemoveAll(dir)
	})
	r.Start(t)
	return r
}

// URL returns the server's redis:// URL.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port) }

// Start starts the server (again, after Kill) and waits until it accepts
// connections.
func (r *Redis) Start(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testsvc: redis-server is not installed: install Redis 6 or newer (Debian: apt-get install redis-server)")
	}
	log, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// The child holds its own copy of the descriptor; ours is only closed.
	defer func() { _ = log.Close() }()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(r.Port),
		"--save", "", "--appendonly", "no", "--dir", r.dir)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("testsvc: start redis-server: %v", err)
	}
	r.cmd = cmd
	if err := WaitReachable(fmt.Sprintf("127.0.0.1:%d", r.Port), 10*time.Second); err != nil {
		t.Fatalf("testsvc: redis-server: %v", err)
	}
}

// Kill kills the server with SIGKILL: everything it held is lost, as in a
// crash.
func (r *Redis) Kill(t testing.TB) {
	t.Helper()
	r.kill()
}

func (r *Redis) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	_ = r.cmd.Wait()
	r.cmd = nil
}
