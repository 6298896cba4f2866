package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// go-redis's own messages (here: a pool that cannot dial) are JSON lines
// of the process's logger, not plain text on stderr.
func TestRedisClientLogsThroughTheLogger(t *testing.T) {
	var buf bytes.Buffer
	newLogger(&buf, "debug")
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer func() { _ = c.Close() }()
	if err := c.Ping(context.Background()).Err(); err == nil {
		t.Fatal("ping of 127.0.0.1:1 succeeded")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var rec struct{ Level, Msg, Detail string }
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil || rec.Msg != "redis client" || !strings.Contains(rec.Detail, "failed to dial") {
		t.Fatalf("logged %q (%v), want a JSON line \"redis client\" saying it failed to dial", buf.String(), err)
	}
}
