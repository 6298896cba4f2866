package guard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"berth.dev/berth/internal/testsvc"
)

// dialLog records go-redis's own log lines (its pool logs how many dials a
// failed connection took).
type dialLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *dialLog) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

// A Redis that is down costs one dial per command the breaker lets through,
// not go-redis's default of five dials 100 ms apart (0.4–0.8 s a request).
//
// Not parallel: go-redis's logger is global.
func TestRedisDownOneDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	logs := &dialLog{}
	redis.SetLogger(logs)
	t.Cleanup(func() { redis.SetLogger(&dialLog{}) })

	r, err := OpenRedis(t.Context(), "redis://"+addr+"/0", RedisOptions{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	if err := r.Ping(t.Context()); err == nil {
		t.Fatal("ping of a closed port succeeded")
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	var dials []string
	for _, l := range logs.lines {
		if strings.Contains(l, "failed to dial") && strings.Contains(l, addr) {
			dials = append(dials, l)
		}
	}
	if len(dials) == 0 {
		t.Fatalf("no failed dial logged; log: %q", logs.lines)
	}
	for _, l := range dials {
		if !strings.Contains(l, "after 1 attempts") {
			t.Errorf("go-redis retried the dial: %s", l)
		}
	}
}

// OpenRedis returns with its minimum idle connections already made
// (go-redis alone makes them in the background, and counts them in its
// stats before they are), as Redis itself counts them, ten times over.
func TestOpenRedisMakesTheMinimumConnections(t *testing.T) {
	url := testsvc.StartRedis(t).URL() // a Redis of its own: its clients are these
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(opt)
	defer func() { _ = admin.Close() }()
	for range 10 {
		r, err := OpenRedis(t.Context(), url, RedisOptions{MinIdle: 24}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		info, err := admin.Info(t.Context(), "clients").Result()
		_ = r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n := clients(info); n < 24+1 { // and this test's own
			t.Fatalf("connections when OpenRedis returned, as Redis counts them (with the test's own): %d, want at least 25", n)
		}
		// Wait until Redis has seen the closed client's connections go.
		for k := 0; k < 100 && clients(admin.Info(t.Context(), "clients").Val()) > 1; k++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// clients picks the client count out of INFO clients (-1: missing).
func clients(info string) int {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "connected_clients:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return n
			}
		}
	}
	return -1
}
