package pg

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the embedded migration files.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder exists
	}
	return sub
}

// Migrate applies every pending migration. Several processes may call it at
// once: a PostgreSQL advisory lock lets one of them migrate at a time.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, Migrations(), goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("apply migrations: %w", err)
	}
	applied := make([]string, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Path)
	}
	return applied, nil
}

// embedded returns the versions of the migrations this binary embeds, in
// order.
func embedded() []int64 {
	names, err := fs.Glob(Migrations(), "*.sql")
	if err != nil {
		panic(err) // the pattern is well formed
	}
	out := make([]int64, 0, len(names))
	for _, name := range names {
		v, err := goose.NumericComponent(name)
		if err != nil {
			panic(fmt.Sprintf("migration %s: %v", name, err)) // TestSchemaFileIsCurrent reads them all
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// Target returns the newest migration version this binary embeds.
func Target() int64 {
	e := embedded()
	return e[len(e)-1]
}

// Schema is what CheckSchema reads of the database: its migration records.
type Schema interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// applied returns the migrations applied to the database: none when it has
// never been migrated.
func applied(ctx context.Context, db Schema) (map[int64]bool, error) {
	// Two statements: one naming a table that does not exist fails
	// when it is planned, whatever a CASE says.
	var migrated bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&migrated); err != nil {
		return nil, fmt.Errorf("read the schema's version: %w", err)
	}
	out := map[int64]bool{}
	if !migrated {
		return out, nil
	}
	rows, err := db.Query(ctx, `SELECT version_id FROM goose_db_version WHERE is_applied AND version_id > 0`)
	if err != nil {
		return nil, fmt.Errorf("read the schema's version: %w", err)
	}
	var v int64
	_, err = pgx.ForEachRow(rows, []any{&v}, func() error { out[v] = true; return nil })
	if err != nil {
		return nil, fmt.Errorf("read the schema's version: %w", err)
	}
	return out, nil
}

// CheckSchema returns an error that says what to do when the database's
// schema is older than this binary's, or lacks one of its migrations (a
// process would otherwise start, pass its readiness probe and answer 500
// for a missing table or column), and how far ahead the schema is when it
// is newer: an older binary runs on a newer schema while a rolling upgrade
// replaces it, which the migrations allow, so that is the caller's to log,
// not an error.
func CheckSchema(ctx context.Context, db Schema) (ahead int64, err error) {
	have, err := applied(ctx, db)
	if err != nil {
		return 0, err
	}
	if len(have) == 0 {
		return 0, errors.New("the database has no berth schema: run `berth migrate` first (or serve with --migrate)")
	}
	var newest int64
	for v := range have {
		newest = max(newest, v)
	}
	var missing []string
	for _, v := range embedded() {
		if !have[v] && v < newest {
			missing = append(missing, strconv.FormatInt(v, 10))
		}
	}
	want := Target()
	switch {
	case len(missing) > 0:
		return 0, fmt.Errorf("the database lacks migration %s of this berth's, below its newest (%d): its schema is not one berth made; `berth migrate` says more",
			strings.Join(missing, ", "), newest)
	case newest < want:
		return 0, fmt.Errorf("the database's schema is at version %d and this berth needs %d: run `berth migrate` first (or serve with --migrate)", newest, want)
	}
	return newest - want, nil
}
