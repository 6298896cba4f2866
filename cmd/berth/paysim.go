package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/payment/paysim"
)

// paysimCmd runs the payment gateway simulator stand-alone: berth talks to
// it with BERTH_GATEWAY_URL pointing at --addr.
func paysimCmd(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := newFlags("paysim")
	addr := fs.String("addr", "127.0.0.1:8090", "listen address")
	public := fs.String("public-url", "", "base URL of the checkout pages (default http://<addr>)")
	var o paysim.Options
	fs.DurationVar(&o.Latency, "latency", 0, "each API call takes a random time up to this")
	fs.Float64Var(&o.ErrorShare, "error-share", 0, "share of API calls answered 503 (0–1)")
	fs.BoolVar(&o.Auto, "auto", false, "decide charges without a click, after --pay-delay")
	fs.DurationVar(&o.PayDelay, "pay-delay", time.Second, "with --auto: a charge is decided after a random time up to this")
	fs.Float64Var(&o.FailShare, "fail-share", 0, "with --auto: share of charges that fail (0–1)")
	fs.IntVar(&o.MaxDeliveries, "duplicates", 1, "deliver each webhook between 1 and this many times")
	fs.DurationVar(&o.Reorder, "reorder", 0, "delay each delivery by a random time up to this, so they arrive out of order")
	fs.Float64Var(&o.LateShare, "late-share", 0, "share of deliveries held back by --late-by (0–1)")
	fs.DurationVar(&o.LateBy, "late-by", 3*time.Minute, "how late the late deliveries are")
	fs.DurationVar(&o.RefundDelay, "refund-delay", time.Second, "a refund succeeds after a random time up to this")
	fs.DurationVar(&o.RetryFor, "retry-for", 24*time.Hour, "how long a webhook berth does not answer 2xx is retried (at most a minute apart)")
	c, err := config.LoadSome(fs, args, getenv, "BERTH_WEBHOOK_SECRET")
	if err != nil {
		return err
	}
	key, err := config.WebhookKey(c.WebhookSecret)
	if err != nil {
		return fmt.Errorf("BERTH_WEBHOOK_SECRET: %w", err)
	}
	for name, share := range map[string]float64{"--error-share": o.ErrorShare, "--fail-share": o.FailShare, "--late-share": o.LateShare} {
		if share < 0 || share > 1 {
			return fmt.Errorf("%s: %v is not between 0 and 1", name, share)
		}
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	log := newLogger(stderr, "info")
	o.Key, o.Log, o.BaseURL = key, log, *public
	if o.BaseURL == "" {
		o.BaseURL = "http://" + ln.Addr().String()
	}
	sim := paysim.New(o)
	defer sim.Close()
	srv := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("paysim listening", "addr", ln.Addr().String(), "checkout", o.BaseURL+"/checkout/{txn}")
	select {
	case err = <-errc:
	case <-ctx.Done():
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = srv.Shutdown(shut)
		cancel()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
