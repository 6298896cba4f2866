package apptest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binDir    string
	binErr    error
)

// Binary builds `berth` from this tree (with the race detector) once per
// test binary and returns its path. Call Cleanup from TestMain to remove it.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "berth-apptest-")
		if binErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-race", "-o", filepath.Join(binDir, "berth"), "berth.dev/berth/cmd/berth")
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatalf("apptest: %v", binErr)
	}
	return filepath.Join(binDir, "berth")
}

// Cleanup removes what Binary built.
func Cleanup() {
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// Process is a `berth serve` process.
type Process struct {
	URL     string
	cmd     *exec.Cmd
	stopped atomic.Bool // stopped by the test (Stop): the cleanup has nothing to check
}

// Signal sends sig to the process (SIGSTOP, SIGCONT, …).
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends sig (SIGTERM, SIGKILL) and waits up to timeout for the process
// to exit, returning how it exited (nil: status 0).
func (p *Process) Stop(sig os.Signal, timeout time.Duration) error {
	p.stopped.Store(true)
	if err := p.cmd.Process.Signal(sig); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("berth serve did not exit within %s of %s", timeout, sig)
	}
}

// StartProcess runs `berth serve` on dbURL (already migrated) with the test
// secrets and extra environment, on a loopback port, and stops it with
// SIGTERM when t ends, failing t unless it shuts down cleanly.
func StartProcess(t testing.TB, dbURL string, env ...string) *Process {
	t.Helper()
	cmd := exec.Command(Binary(t), "serve")
	cmd.Env = append(os.Environ(),
		"BERTH_HTTP_ADDR=127.0.0.1:0",
		"BERTH_PAYSIM=on",
		"BERTH_DATABASE_URL="+dbURL,
		"BERTH_AUTH_SECRET="+AuthSecret,
		"BERTH_WEBHOOK_SECRET="+WebhookSecret,
		"BERTH_LOG_LEVEL=info",
		// As in TestConfig: the rule tests are not about the limits, and a
		// race-instrumented process on a busy machine may wait long for a
		// connection. Tests of the surge layers set their own.
		"BERTH_HOLD_LIMIT=off",
		"BERTH_REQUEST_LIMIT=off",
		"BERTH_ADDRESS_LIMIT=off",
		"BERTH_SHED_WAIT=5s",
		"GORACE=halt_on_error=1",
	)
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("apptest: start berth serve: %v", err)
	}
	addr := make(chan string, 1)
	var logMu sync.Mutex
	var logTail []string
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			logTail = append(logTail, line)
			if len(logTail) > 50 {
				logTail = logTail[1:]
			}
			logMu.Unlock()
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" {
				addr <- rec.Addr
			}
			if strings.Contains(line, `"level":"ERROR"`) {
				t.Logf("berth serve: %s", line) // a server error belongs in the test's log
			}
			if strings.Contains(line, "WARNING: DATA RACE") {
				t.Errorf("berth serve: data race")
			}
		}
	}()
	p := &Process{cmd: cmd}
	select {
	case a := <-addr:
		p.URL = "http://" + a
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("apptest: berth serve did not start listening:\n%s", strings.Join(logTail, "\n"))
	}
	t.Cleanup(func() {
		if p.stopped.Load() {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				logMu.Lock()
				defer logMu.Unlock()
				t.Errorf("apptest: berth serve exited with %v:\n%s", err, strings.Join(logTail, "\n"))
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("apptest: berth serve did not stop within 30s of SIGTERM")
		}
	})
	return p
}
