package pg

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"

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

// Target returns the newest migration version this binary embeds.
func Target() int64 {
	names, err := fs.Glob(Migrations(), "*.sql")
	if err != nil {
		panic(err) // the pattern is well formed
	}
	var newest int64
	for _, name := range names {
		v, err := goose.NumericComponent(name)
		if err != nil {
			panic(fmt.Sprintf("migration %s: %v", name, err)) // TestSchemaFileIsCurrent reads them all
		}
		newest = max(newest, v)
	}
	return newest
}

// Version returns the newest migration applied to the database: 0 when it
// has never been migrated.
func Version(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (int64, error) {
	// Two statements: one naming a table that does not exist fails
	// when it is planned, whatever its CASE says.
	var migrated bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&migrated); err != nil {
		return 0, fmt.Errorf("read the schema's version: %w", err)
	}
	var v int64
	if !migrated {
		return 0, nil
	}
	err := db.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read the schema's version: %w", err)
	}
	return v, nil
}

// CheckSchema returns an error that says what to do when the database's
// schema is older than this binary's (a process would otherwise start, pass
// its readiness probe and answer 500 for a missing table or column), and
// how far ahead the schema is when it is newer: an older binary runs on a
// newer schema while a rolling upgrade replaces it, which the migrations
// allow, so that is the caller's to log, not an error.
func CheckSchema(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (ahead int64, err error) {
	have, err := Version(ctx, db)
	if err != nil {
		return 0, err
	}
	switch want := Target(); {
	case have == 0:
		return 0, errors.New("the database has no berth schema: run `berth migrate` first (or serve with --migrate)")
	case have < want:
		return 0, fmt.Errorf("the database's schema is at version %d and this berth needs %d: run `berth migrate` first (or serve with --migrate)", have, want)
	default:
		return have - want, nil
	}
}
