package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/pg"
)

func serve(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return runApp(ctx, "serve", args, getenv, stderr, (*app.App).Run)
}

// runApp is what serve and worker share: it loads the settings, wires the
// app, listens on BERTH_HTTP_ADDR and runs run (App.Run or App.RunWorker)
// on it until ctx ends.
func runApp(ctx context.Context, name string, args []string, getenv func(string) string, stderr io.Writer,
	run func(a *app.App, ctx context.Context, ln net.Listener) error) error {
	fs := newFlags(name)
	fs.SetOutput(stderr)
	cfg, err := config.LoadFlags(fs, args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	log := newLogger(stderr, cfg.LogLevel)
	for _, w := range config.Unknown(os.Environ()) {
		log.Warn(w)
	}
	a, err := app.New(ctx, cfg, app.Options{Log: log})
	if err != nil {
		return err
	}
	defer a.Close()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	return run(a, ctx, ln)
}

func migrate(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := newFlags("migrate")
	warnUnknown(stderr)
	c, err := config.LoadSome(fs, args, getenv, "BERTH_DATABASE_URL")
	if err != nil {
		return err
	}
	pool, err := pg.Open(ctx, c.DatabaseURL, pg.PoolConfig{MaxConns: 2, AppName: "berth-migrate"})
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := pg.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "applied %d migrations\n", len(applied))
	for _, a := range applied {
		fmt.Fprintln(stderr, " ", a)
	}
	return checkSchema(ctx, pool, stderr)
}

// checkSchema is pg.CheckSchema for a command: an older schema is its
// error, a newer one a warning on w.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, w io.Writer) error {
	ahead, err := pg.CheckSchema(ctx, pool)
	if err != nil {
		return err
	}
	if ahead > 0 {
		fmt.Fprintf(w, "warning: the database's schema is %d versions ahead of this berth's (%d): a newer berth migrated it\n", ahead, pg.Target())
	}
	return nil
}

func token(args []string, getenv func(string) string, stdout io.Writer) error {
	fs := newFlags("token")
	role := fs.String("role", auth.Customer, "customer, host or admin")
	sub := fs.Int64("sub", 0, "the caller's numeric id")
	ttl := fs.Duration("ttl", 24*time.Hour, "how long the token is valid")
	c, err := config.LoadSome(fs, args, getenv, "BERTH_AUTH_SECRET")
	if err != nil {
		return err
	}
	if *ttl <= 0 {
		return fmt.Errorf("-ttl %s: a token must be valid for some time", *ttl)
	}
	tok, err := auth.Issue([]byte(c.AuthSecret), *sub, *role, clock.System{}.Now(), *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

// warnUnknown tells a command's user of each BERTH_ variable that is no
// setting (config.Unknown), before a missing setting's error: a misspelt
// BERTH_DATABASE_URL is otherwise only "BERTH_DATABASE_URL is required".
func warnUnknown(w io.Writer) {
	for _, u := range config.Unknown(os.Environ()) {
		fmt.Fprintln(w, "warning:", u)
	}
}
