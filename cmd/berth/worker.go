package main

import (
	"context"
	"flag"
	"io"
	"time"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/config"
)

// worker runs the outbox relay and the event consumers without the API,
// for deployments that separate them (then serve runs with
// BERTH_EVENTS_IN_SERVE=false). It takes serve's settings and serves
// /metrics and /healthz on BERTH_HTTP_ADDR.
func worker(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return runApp(ctx, "worker", args, getenv, stderr, (*app.App).RunWorker)
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
