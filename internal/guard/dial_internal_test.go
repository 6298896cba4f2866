package guard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
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
