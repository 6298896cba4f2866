package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paysim"
)

// wirePayments builds the payment service on the configured gateway, or on
// the built-in simulator when there is none.
func (a *App) wirePayments(cfg config.Config, o Options) error {
	key, err := config.WebhookKey(cfg.WebhookSecret)
	if err != nil {
		return fmt.Errorf("BERTH_WEBHOOK_SECRET: %w", err)
	}
	gw := o.Gateway
	switch {
	case gw != nil:
	case cfg.GatewayURL != "":
		gw = payment.NewClient(cfg.GatewayURL, payment.ClientOptions{Registry: o.Registry})
	case cfg.PaySim:
		// In process, the simulator's webhooks go to this berth only
		// (set in runPayments), whatever a caller asks for.
		a.PaySim = paysim.New(paysim.Options{Key: key, Clock: o.Clock, Log: o.Log, InProcess: true})
		gw = a.PaySim
		o.Log.Warn("BERTH_PAYSIM=on: the built-in payment simulator takes payments (checkout pages under /paysim/); no real money moves")
	default:
		return errors.New("BERTH_GATEWAY_URL: is required (or BERTH_PAYSIM=on on a loopback address)")
	}
	a.Payments = payment.NewService(a.arch(), payment.Options{
		Pool: a.Pool, Lifecycle: a.Life, Gateway: gw, WebhookKey: key, BaseURL: cfg.PublicURL,
	})
	a.Refunds = a.Payments.Refunds()
	return nil
}

func (a *App) paySimHandler() http.Handler {
	if a.PaySim == nil {
		return nil
	}
	return a.PaySim.Handler()
}

// runPayments points webhooks and checkout pages at the listen address
// unless a public URL is configured, and starts the payment workers: the
// idempotency-key janitor and the simulator's deliveries.
func (a *App) runPayments(ctx context.Context, wg *sync.WaitGroup, addr net.Addr) {
	base := a.Config.PublicURL
	if base == "" {
		base = "http://" + reachable(addr)
		a.Payments.SetBaseURL(base)
	}
	if a.PaySim != nil {
		a.PaySim.SetBaseURL(base + "/paysim")
		a.PaySim.SetWebhookURL(a.Payments.WebhookURL())
		wg.Go(func() { a.PaySim.Run(ctx) })
	}
	wg.Go(func() { a.Keys.RunJanitor(ctx, 10*time.Minute) })
}

// reachable turns a listen address into one to connect to: an unspecified
// host (":8080") becomes the loopback address.
func reachable(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
