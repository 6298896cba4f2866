package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"berth.dev/berth/internal/audit"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/seed"
)

func seedCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	now := clock.System{}.Now()
	f := seed.Defaults(now.AddDate(0, 0, 1))
	fs := newFlags("seed")
	warnUnknown(stderr)
	fs.IntVar(&f.Days, "days", f.Days, "days of schedule")
	fs.IntVar(&f.PerDay, "flights", f.PerDay, "flights per day")
	fs.IntVar(&f.Seats, "seats", f.Seats, "seats per flight (a multiple of 6)")
	start := fs.String("start", f.Start.Format(time.DateOnly), "first day of the schedule")
	fs.Uint64Var(&f.Seed, "seed", f.Seed, "random seed; the same seed loads the same schedule")
	fs.IntVar(&f.Workers, "workers", f.Workers, "parallel COPY streams")
	c := seed.CarDefaults(now)
	carFlags(fs, &c)
	// The history's events reach back as far as serve keeps them.
	cfg, err := config.LoadSome(fs, args, getenv, "BERTH_DATABASE_URL", "BERTH_EVENT_RETENTION")
	if err != nil {
		return err
	}
	c.Seed, c.Workers, c.EventRetention = f.Seed, f.Workers, cfg.Events.Retention
	if f.Start, err = time.Parse(time.DateOnly, *start); err != nil {
		return fmt.Errorf("--start: %q is not a date like 2026-12-20", *start)
	}
	pool, err := pg.Open(ctx, cfg.DatabaseURL, pg.PoolConfig{MaxConns: int32(f.Workers + 2), AppName: "berth-seed"})
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := checkSchema(ctx, pool, stderr); err != nil {
		return err
	}
	f.Progress, c.Progress = stderr, stderr
	if f.Days > 0 && f.PerDay > 0 {
		flights, seats, err := seed.LoadFlights(ctx, pool, f)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "seeded %d flights with %d seats\n", flights, seats)
	}
	return seedCars(ctx, pool, c, stdout)
}

func auditCmd(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := newFlags("audit")
	// I7 needs the sweeper's period and I6 the event retention: serve's.
	lag := fs.Duration("consumer-lag", 5*time.Minute, "how long the tickets consumer may lag behind a change, for I6")
	cfg, err := config.LoadSome(fs, args, getenv, "BERTH_DATABASE_URL", "BERTH_SWEEP_INTERVAL", "BERTH_EVENT_RETENTION")
	if err != nil {
		return err
	}
	pool, err := pg.Open(ctx, cfg.DatabaseURL, pg.PoolConfig{MaxConns: 2, AppName: "berth-audit"})
	if err != nil {
		return err
	}
	defer pool.Close()
	now := clock.System{}.Now()
	results, err := audit.Run(ctx, pool, audit.Options{Now: now, SweepInterval: cfg.SweepInterval,
		EventRetention: cfg.Events.Retention, ConsumerLag: *lag})
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, audit.Format(results))
	// The admin page shows the last audit. A database migrated before the
	// table existed cannot keep it, which the audit itself survives.
	if err := audit.Record(ctx, pool, now, results); err != nil {
		fmt.Fprintf(stdout, "(not recorded: %v)\n", err)
	}
	if audit.Failed(results) {
		return fmt.Errorf("invariants violated")
	}
	fmt.Fprintln(stdout, "all invariants hold")
	return nil
}
