package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"berth.dev/berth/internal/bench"
	"berth.dev/berth/internal/config"
)

// benchCmd runs `berth bench`: it prepares its own databases, runs berth
// (one or more `berth serve` processes, or inside this process) with the
// surge layers on and off, drives a scenario at it, audits, and writes a
// table, a JSON file and an HTML report.
func benchCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f, err := benchOptions(args, getenv, stderr)
	if err != nil {
		return err
	}
	o, out, profile := f.o, f.out, f.profile
	if !f.inProcess {
		exe := f.serve
		if exe == "" {
			if exe, err = os.Executable(); err != nil {
				return fmt.Errorf("bench: find this berth to run `berth serve`: %w (or use --in-process)", err)
			}
		}
		o.ServeArgv = []string{exe, "serve"}
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("bench: output folder: %w", err)
	}
	base := filepath.Join(out, fmt.Sprintf("berth-bench-%s-%s", o.Scenario, time.Now().Format("20060102-150405")))
	logFile, err := os.Create(base + ".log")
	if err != nil {
		return fmt.Errorf("bench: server log: %w", err)
	}
	defer func() { _ = logFile.Close() }() // berth's log: nothing to do if the last lines are lost
	o.ServerLog = logFile
	o.Progress = stderr
	o.Getenv = getenv

	if profile != "" {
		stop, err := startCPUProfile(profile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if f.hotProfile != "" {
		pf, err := os.Create(f.hotProfile)
		if err != nil {
			return fmt.Errorf("bench: hot-flight cpu profile: %w", err)
		}
		defer func() { _ = pf.Close() }() // a profile cut short is still readable
		o.HotProfile = pf
	}
	rep, runErr := bench.Run(ctx, o)
	if rep == nil {
		return runErr
	}
	rep.WriteTable(stdout)
	for _, f := range []struct {
		ext   string
		write func(io.Writer) error
	}{{".json", rep.WriteJSON}, {".html", rep.WriteHTML}} {
		if err := writeFile(base+f.ext, f.write); err != nil {
			return errors.Join(runErr, err)
		}
	}
	fmt.Fprintf(stdout, "\nreport: %s.html\njson:   %s.json\nberth's log: %s.log\n", base, base, base)
	if runErr != nil {
		fmt.Fprintf(stderr, "\n!!! berth bench FAILED !!!\n")
	}
	return runErr
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := write(f); err != nil {
		_ = f.Close() // the write error is the one to report
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// benchFlags are the parsed flags of `berth bench`.
type benchFlags struct {
	o                        bench.Options
	out, profile, hotProfile string
	serve                    string
	inProcess                bool
}

// benchOptions parses the flags of `berth bench`. --quick switches the
// defaults to the short preset; flags given beside it still win.
func benchOptions(args []string, getenv func(string) string, stderr io.Writer) (f benchFlags, err error) {
	o := bench.Defaults()
	for _, a := range args {
		if a == "-quick" || a == "--quick" || a == "-quick=true" || a == "--quick=true" {
			o = bench.Quick()
		}
	}
	fs := newFlags("bench")
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: berth bench [flags]

Creates a fresh database per mode (berth_bench_…, dropped afterwards unless
--keep) on the PostgreSQL server of BERTH_DATABASE_URL, runs berth (as
--processes `+"`berth serve`"+` processes sharing the load, or in this process
with --in-process) with the surge layers off and on, drives the scenario at
it, audits the invariants, and writes a table, a JSON file and an HTML report.
Exits 1 on any oversell, invariant violation or 5xx other than 503.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.Bool("quick", false, "a short, gentle preset for smoke tests (other flags still override it)")
	fs.StringVar(&o.Scenario, "scenario", o.Scenario, "flash-sale or car-peak")
	fs.StringVar(&o.Protect, "protect", o.Protect, "on, off or both (both runs off then on, side by side)")
	fs.BoolVar(&o.Keep, "keep", o.Keep, "keep the bench databases afterwards")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "random seed: the same seed offers the same requests")
	fs.StringVar(&f.out, "out", ".", "folder for the report, the JSON file and berth's log")
	fs.StringVar(&f.profile, "cpuprofile", "", "write a CPU profile of this process to this file (berth's too only with --in-process)")
	fs.StringVar(&f.hotProfile, "hot-cpuprofile", "", "write a CPU profile of this process over the protected mode's hot-flight loop (--hot-clients) to this file: berth's hold path with --in-process")
	processes := "1"
	fs.StringVar(&processes, "processes", processes, "berth processes sharing each mode's database, Redis and load: 1, 2, or both (1 then 2); more than one needs --redis-url")
	fs.StringVar(&f.serve, "serve", "", "run this berth binary as `berth serve` instead of this one (one load generator for two builds, side by side)")
	fs.BoolVar(&f.inProcess, "in-process", false, "run berth inside the bench's process instead of as `berth serve` processes (for --cpuprofile; memory then includes the load generator)")

	fs.IntVar(&o.Flights, "flights", o.Flights, "flash-sale: flights on sale, 180 seats each")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "flash-sale: hold attempts offered per second (open loop)")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "how long the offered load lasts")
	fs.Float64Var(&o.SeatShare, "seat-share", o.SeatShare, "flash-sale: share of holds naming 1–3 adjacent seats (the rest hold a quantity)")
	fs.Float64Var(&o.PayShare, "pay-share", o.PayShare, "flash-sale: share of successful holds that go on to pay")
	fs.Float64Var(&o.Zipf, "zipf", o.Zipf, "popularity skew over flights and cars (exponent > 1)")
	fs.IntVar(&o.WaitingRoom, "waiting-room", o.WaitingRoom, "flash-sale, protected mode: switch each flight's waiting room on with this admitPerSecond (0: off)")
	fs.DurationVar(&o.WaitMax, "wait-max", o.WaitMax, "how long a customer waits in the waiting room before giving up")

	fs.IntVar(&o.Cars, "cars", o.Cars, "car-peak: popular cars")
	fs.Float64Var(&o.SearchRate, "search-rate", o.SearchRate, "car-peak: searches offered per second")
	fs.Float64Var(&o.CarHoldRate, "car-hold-rate", o.CarHoldRate, "car-peak: car holds offered per second")
	fs.Float64Var(&o.UncachedSearchRate, "uncached-search-rate", o.UncachedSearchRate, "car-peak: searches per second besides --search-rate that berth's search cache cannot answer (0: none)")

	fs.IntVar(&o.HotClients, "hot-clients", o.HotClients, "closed loop: clients holding seats on one hot flight")
	fs.IntVar(&o.HotClientsMore, "hot-clients-more", o.HotClientsMore, "closed loop: a second hot-flight measurement with this many clients (0: skipped)")
	fs.IntVar(&o.RejectClients, "reject-clients", o.RejectClients, "closed loop: clients on the rejection paths and the bare net/http handler")
	fs.DurationVar(&o.ClosedDuration, "closed-duration", o.ClosedDuration, "length of each closed-loop measurement")
	fs.DurationVar(&o.StatsSettle, "stats-settle", o.StatsSettle, "wait before reading the database's transaction counters around the hot-flight loops (PostgreSQL reports idle sessions' statistics up to 10 s late)")
	fs.BoolVar(&o.NoClosed, "no-closed", o.NoClosed, "skip the closed-loop measurements")

	fs.IntVar(&o.Conns, "conns", o.Conns, "open loop: requests in flight at most per stream (and so connections)")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "time budget of one request")
	fs.DurationVar(&o.Drain, "drain", o.Drain, "how long to wait for late answers after the offered load ends")
	fs.DurationVar(&o.Settle, "settle", o.Settle, "pause before stopping berth, for payments' webhooks to land")
	// The bench databases are made on the server of BERTH_DATABASE_URL,
	// and berth is given BERTH_REDIS_URL, read as serve reads them.
	c, err := config.LoadSome(fs, args, getenv, "BERTH_DATABASE_URL", "BERTH_REDIS_URL")
	if err != nil {
		return f, err
	}
	o.DatabaseURL, o.RedisURL = c.DatabaseURL, c.RedisURL
	if fs.NArg() > 0 {
		return f, fmt.Errorf("bench: unexpected argument %q", strings.Join(fs.Args(), " "))
	}
	if o.Processes, err = bench.ParseProcesses(processes); err != nil {
		return f, fmt.Errorf("bench: %w", err)
	}
	f.o = o
	return f, nil
}

// startCPUProfile profiles this process (berth and the load generator
// share it) until the returned stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close() // a profile cut short is still readable
	}, nil
}
