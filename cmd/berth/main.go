// Command berth is the reservation engine: one binary whose subcommands
// serve the API, migrate and seed the database, issue tokens, run a local
// development stack and audit the invariants.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	_ "time/tzdata" // flight times render in airport time zones on any host

	"github.com/redis/go-redis/v9"
)

// commands lists every subcommand with one sentence of what it does: the
// usage text and each command's -h are made from it.
var commands = []struct{ name, what string }{
	{"serve", "serve the HTTP API and run the background workers"},
	{"worker", "run only the outbox relay and the event consumers"},
	{"migrate", "apply the embedded database migrations and exit"},
	{"seed", "load a realistic flight schedule (and cars) into the database"},
	{"token", "print a bearer token for a role and subject"},
	{"paysim", "run the payment gateway simulator (checkout page, signed webhooks)"},
	{"dev", "run a local stack: private PostgreSQL, migrations, demo data, serve"},
	{"audit", "check the invariants against a database; exit 1 on any violation"},
	{"bench", "load-test berth, bare and protected, side by side, in one or two processes"},
	{"version", "print the version and commit this binary was built from"},
	{"probe", "ask a running berth's /healthz (or --url); exit 0 when it answers 2xx"},
}

func usage() string {
	var b strings.Builder
	b.WriteString("berth — a reservation engine for seats and cars that never sells one twice.\n\n")
	b.WriteString("Usage: berth <command> [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.what)
	}
	b.WriteString("\nSettings come from BERTH_* environment variables (see README.md); each\n")
	b.WriteString("command's flags override them: berth <command> -h lists them.\n")
	return b.String()
}

// newFlags returns the flag set of command name, whose -h starts with what
// the command does.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		for _, c := range commands {
			if c.name == name {
				fmt.Fprintf(fs.Output(), "berth %s: %s.\n\n", name, c.what)
			}
		}
		fmt.Fprintf(fs.Output(), "Usage: berth %s [flags]\n\nFlags:\n", name)
		fs.PrintDefaults()
	}
	return fs
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var quiet exitError
		if !errors.Is(err, flag.ErrHelp) && !errors.As(err, &quiet) {
			fmt.Fprintln(os.Stderr, "berth:", err)
		}
		os.Exit(exitCode(err))
	}
}

// exitError carries a process exit code other than 1, for a failure that
// has already been explained.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func exitCode(err error) int {
	var e exitError
	if errors.As(err, &e) {
		return e.code
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0 // asked for help, and got it
	}
	return 1
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return exitError{2}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return serve(ctx, rest, getenv, stderr)
	case "worker":
		return worker(ctx, rest, getenv, stderr)
	case "migrate":
		return migrate(ctx, rest, getenv, stderr)
	case "seed":
		return seedCmd(ctx, rest, getenv, stdout, stderr)
	case "token":
		return token(rest, getenv, stdout)
	case "paysim":
		return paysimCmd(ctx, rest, getenv, stderr)
	case "dev":
		return dev(ctx, rest, getenv, stdout, stderr)
	case "audit":
		return auditCmd(ctx, rest, getenv, stdout)
	case "bench":
		return benchCmd(ctx, rest, getenv, stdout, stderr)
	case "version", "--version":
		return versionCmd(stdout)
	case "probe":
		return probe(ctx, rest, getenv, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage())
		return nil
	}
	fmt.Fprint(stderr, usage())
	return fmt.Errorf("unknown command %q", cmd)
}

// newLogger returns the process's logger, JSON lines on w, and makes it
// go-redis's too (redisLog).
func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	log := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
	redis.SetLogger(redisLog{log})
	return log
}

// redisLog passes go-redis's own messages (a pool that cannot dial, once
// per attempt) to the process's logger at debug level, instead of the
// plain-text lines go-redis prints on stderr by default: berth reports
// Redis's state itself (/readyz, berth_guard_redis_up, a warning when it
// goes).
type redisLog struct{ log *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.log.DebugContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}
