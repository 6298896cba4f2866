package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Report is one recorded audit: when it ran and what it found.
type Report struct {
	At      time.Time `json:"ranAt"`
	OK      bool      `json:"ok"`
	Results []Result  `json:"results"`
}

// Record stores results as the audit that ran at at, so the admin page can
// show the last one.
func Record(ctx context.Context, pool *pgxpool.Pool, at time.Time, results []Result) error {
	b, err := json.Marshal(results)
	if err != nil {
		return fmt.Errorf("record audit: %w", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO audit_run (ran_at, ok, results) VALUES ($1, $2, $3)`,
		at, !Failed(results), b); err != nil {
		return fmt.Errorf("record audit: %w", err)
	}
	return nil
}

// Last returns the most recent recorded audit; false when none ran yet.
func Last(ctx context.Context, pool *pgxpool.Pool) (Report, bool, error) {
	var r Report
	var b []byte
	err := pool.QueryRow(ctx, `SELECT ran_at, ok, results FROM audit_run ORDER BY id DESC LIMIT 1`).Scan(&r.At, &r.OK, &b)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("last audit: %w", err)
	}
	if err := json.Unmarshal(b, &r.Results); err != nil {
		return r, false, fmt.Errorf("last audit: %w", err)
	}
	return r, true, nil
}
