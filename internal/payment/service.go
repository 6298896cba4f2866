package payment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/base"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
)

// Service starts charges, processes the gateway's webhooks and refunds.
type Service struct {
	pool       *pgxpool.Pool
	clock      clock.Clock
	life       *booking.Lifecycle
	gateway    Gateway
	webhookKey []byte
	log        *slog.Logger
	baseURL    atomic.Pointer[string]

	webhooks *prometheus.CounterVec
	refunds  *prometheus.CounterVec
}

// Options are what NewService needs besides the shared base.
type Options struct {
	Pool      *pgxpool.Pool
	Lifecycle *booking.Lifecycle
	Gateway   Gateway
	// WebhookKey is the HMAC key of webhook signatures
	// (config.WebhookKey of BERTH_WEBHOOK_SECRET).
	WebhookKey []byte
	// BaseURL is where the gateway reaches berth ("http://host:port");
	// SetBaseURL may set it later, once the listener is known.
	BaseURL string
}

// NewService returns a payment service on b's clock and logger, with its
// metrics registered on b.Registry.
func NewService(b base.Archetype, o Options) *Service {
	s := &Service{
		pool: o.Pool, clock: b.Clock, life: o.Lifecycle, gateway: o.Gateway, webhookKey: o.WebhookKey, log: b.Log,
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_payment_webhooks_total", Help: "Validly signed gateway webhooks, by type and what berth did.",
		}, []string{"type", "result"}),
		refunds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_refunds_total", Help: "Refunds, by step (requested at the gateway, completed).",
		}, []string{"step"}),
	}
	b.Registry.MustRegister(s.webhooks, s.refunds)
	s.SetBaseURL(o.BaseURL)
	return s
}

// SetBaseURL sets where the gateway reaches berth, for webhook URLs.
func (s *Service) SetBaseURL(u string) {
	u = strings.TrimRight(u, "/")
	s.baseURL.Store(&u)
}

// WebhookURL is the URL the gateway posts webhooks to.
func (s *Service) WebhookURL() string { return *s.baseURL.Load() + "/payments/webhook" }

// Charge is a charge berth asked the gateway for (docs/api.md's payment).
type Charge struct {
	ID            int64  `json:"paymentId"`
	Status        string `json:"status"`
	CheckoutURL   string `json:"checkoutUrl"`
	BookingID     int64  `json:"-"`
	ProviderTxnID string `json:"-"`
}

// StartCharge starts the charge of booking id's amount for its customer,
// caller. A booking has one charge: a repeated request resumes it (the same
// gateway idempotency key), so the customer is never charged twice for
// asking twice. No transaction is open while the gateway is called.
//
// Returns fault.NotFound unless caller owns the booking, fault.HoldExpired
// for an expired hold, fault.InvalidState for a booking that is not held,
// fault.Overloaded when the gateway is unavailable.
func (s *Service) StartCharge(ctx context.Context, caller auth.Caller, id int64) (*Charge, error) {
	var (
		c        Charge
		amount   int64
		currency string
		key      string
	)
	// One statement, one round trip: the booking as it is, and its charge
	// recorded (or the one recorded before, resumed) only when the booking
	// can still be paid; the checks below word the refusal otherwise.
	var (
		status  booking.Status
		expires time.Time
		charged *int64
	)
	now := s.clock.Now()
	err := s.pool.QueryRow(ctx, `WITH b AS (
			SELECT id, status, hold_expires_at, amount, currency FROM booking WHERE id = $1 AND customer_id = $2),
		c AS (
			-- The amount is the booking's, computed by the server when it
			-- was held, never the client's (docs/invariants.md race 4).
			INSERT INTO charge (booking_id, amount, currency, created_at)
			SELECT id, amount, currency, $3 FROM b WHERE status = 'HELD' AND hold_expires_at > $3
			ON CONFLICT (booking_id) DO UPDATE SET booking_id = EXCLUDED.booking_id
			RETURNING id, amount, currency, gateway_key::text, provider_txn_id, checkout_url)
		SELECT b.status, b.hold_expires_at, c.id, coalesce(c.amount, 0), coalesce(c.currency, ''),
			coalesce(c.gateway_key, ''), coalesce(c.provider_txn_id, ''), coalesce(c.checkout_url, '')
		FROM b LEFT JOIN c ON true`, id, caller.ID, now).
		Scan(&status, &expires, &charged, &amount, &currency, &key, &c.ProviderTxnID, &c.CheckoutURL)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fault.New(fault.NotFound, "no booking %d", id)
	case err != nil:
		return nil, fmt.Errorf("pay booking %d: %w", id, err)
	case holdOver(status, expires, now):
		return nil, fault.New(fault.HoldExpired, "the hold of booking %d expired at %s", id, expires.UTC().Format(time.RFC3339))
	case status.Paid():
		return nil, fault.New(fault.InvalidState, "booking %d is paid already (%s)", id, status)
	case status != booking.Held || charged == nil:
		return nil, fault.New(fault.InvalidState, "a booking that is %s cannot be paid", status)
	}
	c.ID, c.BookingID = *charged, id
	c.Status = "PENDING"
	if c.ProviderTxnID != "" {
		return &c, nil
	}
	res, err := s.gateway.Charge(ctx, "charge-"+key, ChargeRequest{
		BookingID: id, Amount: amount, Currency: currency, WebhookURL: s.WebhookURL(),
	})
	if err != nil {
		return nil, fmt.Errorf("charge booking %d: %w", id, err)
	}
	// Two requests may both have called the gateway: the key made it one
	// charge, and whichever stores it first wins; the other reads it. The
	// gateway has the charge now, so a lost connection is tried again on
	// another (the statement is idempotent) rather than answered 503 for a
	// charge that was made.
	for attempt := 1; ; attempt++ {
		err = s.pool.QueryRow(ctx, `UPDATE charge SET provider_txn_id = coalesce(provider_txn_id, $2),
				checkout_url = coalesce(checkout_url, $3)
			WHERE id = $1 RETURNING provider_txn_id, checkout_url`, c.ID, res.ProviderTxnID, res.CheckoutURL).
			Scan(&c.ProviderTxnID, &c.CheckoutURL)
		if err == nil || attempt == 3 || ctx.Err() != nil {
			break
		}
		s.log.Warn("store a charge the gateway made; trying again", "charge", c.ID, "err", err)
	}
	if err != nil {
		return nil, fmt.Errorf("store charge %d: %w", c.ID, err)
	}
	return &c, nil
}

// holdOver reports whether a booking in status, held until expires, is past
// its hold at now: expired, or due for the sweeper.
func holdOver(status booking.Status, expires, now time.Time) bool {
	return status == booking.Expired || (status == booking.Held && !expires.After(now))
}
