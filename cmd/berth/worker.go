package main

import (
	"context"
	"io"

	"berth.dev/berth/internal/app"
)

// worker runs the outbox relay and the event consumers without the API,
// for deployments that separate them (then serve runs with
// BERTH_EVENTS_IN_SERVE=false). It takes serve's settings and serves
// /metrics and /healthz on BERTH_HTTP_ADDR.
func worker(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return runApp(ctx, "worker", args, getenv, stderr, (*app.App).RunWorker)
}
