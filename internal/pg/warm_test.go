package pg_test

import (
	"context"
	"testing"

	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// Open returns with the pool's minimum connections already made (pgxpool
// alone makes them in the background, after the first requests may have
// come), ten times over.
func TestOpenMakesTheMinimumConnections(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	for range 10 {
		pool, err := pg.Open(context.Background(), url, pg.PoolConfig{MaxConns: 12, MinConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		n := pool.Stat().IdleConns() // made and waiting (TotalConns counts the ones being made, too)
		pool.Close()
		if n < 8 {
			t.Fatalf("connections when Open returned: %d, want the minimum 8", n)
		}
	}
}
