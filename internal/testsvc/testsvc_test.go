package testsvc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/testsvc"
)

// A replica started from the primary follows its writes, refuses its own,
// and the primary comes back with its data after a crash.
func TestPostgresPrimaryReplicaAndCrash(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary := testsvc.StartPostgres(t, testsvc.PostgresOptions{})
	url := primary.CreateDatabase(t, "svc")
	replica := primary.StartReplica(t)

	exec := func(url, sql string) error {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec(url, "CREATE TABLE x (n int); INSERT INTO x VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	replicaURL := replica.URL("svc")
	apptest.Eventually(t, 30*time.Second, "the replica never saw the primary's row", func() bool {
		conn, err := pgx.Connect(ctx, replicaURL)
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		var n int
		return conn.QueryRow(ctx, "SELECT n FROM x").Scan(&n) == nil && n == 42
	})
	if err := exec(replicaURL, "INSERT INTO x VALUES (1)"); err == nil {
		t.Fatal("the replica accepted a write")
	}

	primary.Stop(t, "immediate")
	if err := exec(url, "SELECT 1"); err == nil {
		t.Fatal("a stopped primary answered")
	}
	primary.Start(t)
	if err := exec(url, "INSERT INTO x VALUES (43)"); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
}

// A killed Redis loses its keys and comes back on the same port.
func TestRedisKillAndRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := testsvc.StartRedis(t)
	opts, err := redis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	defer func() { _ = c.Close() }()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Kill(t)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("a killed Redis answered")
	}
	r.Start(t)
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("after a restart the key should be gone, got %v", err)
	}
}
