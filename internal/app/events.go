package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/events"
)

// consumers lists the event consumers every berth process feeds. Adding
// one is one line here; its Name must never change once deployed.
func consumers(cfg config.Config, c clock.Clock, log *slog.Logger) ([]events.Consumer, error) {
	var key []byte
	if cfg.Events.NotifyURL != "" || cfg.Events.CheckinURL != "" {
		var err error
		if key, err = config.WebhookKey(cfg.Events.HookSecret); err != nil {
			return nil, fmt.Errorf("BERTH_HOOK_SECRET: %w", err)
		}
	}
	var sender events.Sender = events.LogSender{Log: log}
	if cfg.Events.NotifyURL != "" {
		sender = events.WebhookSender{Hook: events.NewHook(cfg.Events.NotifyURL, key, c)}
	}
	checkin := events.Checkin{Log: log}
	if cfg.Events.CheckinURL != "" {
		checkin.Hook = events.NewHook(cfg.Events.CheckinURL, key, c)
	}
	return []events.Consumer{
		events.Tickets{Clock: c},
		events.Notifications{Sender: sender},
		checkin,
	}, nil
}

// wireEvents builds the outbox relay and the consumers.
func (a *App) wireEvents(o Options) error {
	cons, err := consumers(a.Config, a.Clock, a.Log)
	if err != nil {
		return err
	}
	if a.Refunds != nil {
		cons = append(cons, a.Refunds)
	}
	cons = append(cons, o.Consumers...)
	s := events.Settings{
		KafkaBrokers: a.Config.KafkaBrokers,
		KafkaTopic:   a.Config.Events.KafkaTopic,
		PollInterval: a.Config.Events.PollInterval,
		Retention:    a.Config.Events.Retention,
	}
	if o.EventSettings != nil {
		o.EventSettings(&s)
	}
	a.Events, err = events.NewWorker(a.arch(), a.Pool, s, cons)
	return err
}

// RunWorker runs only the event machinery (`berth worker`) until ctx ends,
// serving /metrics and /healthz on ln.
func (a *App) RunWorker(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	a.Log.Info("worker listening", "addr", ln.Addr().String())
	done := make(chan struct{})
	var wg sync.WaitGroup
	a.runAudit(ctx, &wg)
	go func() {
		if a.Refunds != nil {
			go a.Refunds.Run(ctx, time.Second)
		}
		a.Events.Run(ctx)
		wg.Wait()
		close(done)
	}()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutCtx)
	<-done
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("worker: %w", err)
	}
	a.Log.Info("worker stopped")
	return nil
}

// eventChecks are what /readyz checks for the event machinery: Kafka, when
// it is used.
func (a *App) eventChecks() map[string]func(context.Context) error {
	if len(a.Config.KafkaBrokers) == 0 {
		return nil
	}
	// Events wait in the outbox while Kafka is away: berth serves on.
	return map[string]func(context.Context) error{"kafka": degraded(a.Events.Ready)}
}
