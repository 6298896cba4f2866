package apptest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisURL returns the test Redis (BERTH_TEST_REDIS_URL, which `make test`
// sets; default redis://127.0.0.1:6379/0).
func RedisURL() string {
	if u := os.Getenv("BERTH_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// SharedRedis returns the test Redis's URL and a key prefix of t's own, so
// that several servers of one test share their surge state and no two tests
// see each other's. The keys are deleted when t ends.
func SharedRedis(t testing.TB) (url, prefix string) {
	t.Helper()
	url = RedisURL()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("apptest: redis url: %v", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix = "berthtest:" + hex.EncodeToString(b[:]) + ":"
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		t.Fatalf("apptest: cannot reach the test Redis at %s (run the tests with `make test`, or set BERTH_TEST_REDIS_URL): %v", url, err)
	}
	t.Cleanup(func() {
		defer func() { _ = c.Close() }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// The rate limiter puts its own prefix before ours.
		for _, pattern := range []string{prefix + "*", "rate:" + prefix + "*"} {
			iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
			if err := iter.Err(); err != nil {
				t.Logf("apptest: clean redis keys %s: %v", pattern, err)
			}
		}
	})
	return url, prefix
}
