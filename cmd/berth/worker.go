package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/config"
)

// worker runs the outbox relay and the event consumers without the API,
// for deployments that separate them (then serve runs with
// BERTH_EVENTS_IN_SERVE=false). It takes serve's settings and serves
// /metrics and /healthz on BERTH_HTTP_ADDR.
func worker(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := config.Load(args, getenv)
	if err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	log := newLogger(stderr, cfg.LogLevel)
	a, err := app.New(ctx, cfg, app.Options{Log: log})
	if err != nil {
		return err
	}
	defer a.Close()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	return a.RunWorker(ctx, ln)
}

type eventAudit struct{ retention, lag time.Duration }

// eventAuditFlags reads what `berth audit` needs for I6: the event
// retention (BERTH_EVENT_RETENTION) and how long a consumer may lag.
func eventAuditFlags(fs *flag.FlagSet, getenv func(string) string) *eventAudit {
	e := &eventAudit{retention: config.Defaults().Events.Retention, lag: 5 * time.Minute}
	if d, err := time.ParseDuration(getenv("BERTH_EVENT_RETENTION")); err == nil {
		e.retention = d
	}
	fs.DurationVar(&e.retention, "event-retention", e.retention, "how long published events are kept, for I6 (BERTH_EVENT_RETENTION)")
	fs.DurationVar(&e.lag, "consumer-lag", e.lag, "how long the tickets consumer may lag behind a change, for I6")
	return e
}
