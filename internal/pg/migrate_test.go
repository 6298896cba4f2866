package pg_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// A process must not start on a schema older than its own (it would pass
// its readiness probe and answer 500 for a missing table), and may start on
// a newer one (a rolling upgrade), which CheckSchema measures.
func TestCheckSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if ahead, err := pg.CheckSchema(ctx, pool); err != nil || ahead != 0 {
		t.Fatalf("migrated database: ahead %d, %v; want 0, nil", ahead, err)
	}
	target := pg.Target()
	if _, err := pool.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true), ($1 + 2, true)`, target+1); err != nil {
		t.Fatal(err)
	}
	if ahead, err := pg.CheckSchema(ctx, pool); err != nil || ahead != 3 {
		t.Errorf("three versions ahead: ahead %d, %v; want 3, nil", ahead, err)
	}
	// A migration below the newest forgotten (out of order) is no schema
	// of this binary's either.
	if _, err := pool.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = $1 - 1`, target); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.CheckSchema(ctx, pool); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("lacks migration %d", target-1)) {
		t.Errorf("one migration below the newest missing: %v; want an error naming it", err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id >= $1`, target-1); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.CheckSchema(ctx, pool); err == nil || !strings.Contains(err.Error(), "run `berth migrate`") {
		t.Errorf("one version behind: %v; want an error saying to run berth migrate", err)
	}
	if _, err := pool.Exec(ctx, `DROP TABLE goose_db_version`); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.CheckSchema(ctx, pool); err == nil || !strings.Contains(err.Error(), "no berth schema") {
		t.Errorf("never migrated: %v; want an error saying it has no berth schema", err)
	}
}
