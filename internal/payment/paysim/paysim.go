// Package paysim is a payment gateway simulator that speaks the gateway
// protocol of docs/api.md: POST /charges and POST /refunds with idempotency
// keys, signed webhooks back to the caller, and a checkout page a person
// can click (pay or fail). It runs inside berth when no gateway is
// configured, and stand-alone as `berth paysim`.
//
// It can be told to misbehave the way real gateways do: answer slowly,
// refuse a share of API calls, fail a share of charges, deliver each
// webhook several times, out of order, or late.
package paysim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/payment"
)

// Options are the simulator's knobs.
type Options struct {
	// Key signs webhooks (the decoded BERTH_WEBHOOK_SECRET).
	Key []byte
	// Clock stamps webhooks; berth checks the stamp against its own.
	Clock clock.Clock
	// BaseURL is where this simulator's checkout pages are served.
	BaseURL string
	// Latency: each API call waits a random time up to it.
	Latency time.Duration
	// ErrorShare of API calls are answered 503 before anything is done.
	ErrorShare float64
	// Auto decides each charge without a click, after a random time up to
	// PayDelay: it fails with probability FailShare, else succeeds.
	Auto      bool
	PayDelay  time.Duration
	FailShare float64
	// MaxDeliveries: each webhook is delivered between 1 and this many
	// times (at least 1).
	MaxDeliveries int
	// Reorder delays each delivery by a random time up to it, so that
	// deliveries overtake each other.
	Reorder time.Duration
	// LateShare of deliveries are held back by LateBy.
	LateShare float64
	LateBy    time.Duration
	// RefundDelay is how long a refund takes before refund.succeeded.
	RefundDelay time.Duration
	Log         *slog.Logger
	// InProcess is the simulator berth runs itself (BERTH_PAYSIM=on):
	// berth calls it directly, so its Handler serves the checkout pages
	// only (no gateway protocol, no list of charges), and every webhook
	// goes to WebhookURL, whatever URL a charge or refund asked for.
	InProcess bool
	// WebhookURL, when set, is where every webhook goes.
	WebhookURL string
	// RetryFor is how long a webhook is retried until berth answers 2xx
	// (default 24 h), the pauses doubling from 50 ms up to RetryWait
	// (default a minute).
	RetryFor, RetryWait time.Duration
	// MaxCharges bounds the charges kept (default 10,000): beyond it the
	// oldest are forgotten, decided ones first, with their idempotency
	// keys, so the simulator's memory stays bounded however it is used.
	MaxCharges int
}

// DefaultMaxCharges is MaxCharges when it is not set.
const DefaultMaxCharges = 10_000

type chargeState int

const (
	pending chargeState = iota
	succeeded
	failed
)

func (s chargeState) String() string { return [...]string{"pending", "succeeded", "failed"}[s] }

type charge struct {
	txn     string
	key     string // in keys
	req     payment.ChargeRequest
	state   chargeState
	created time.Time
}

// Stats is what the simulator did, for tests and its index page.
type Stats struct {
	Charges, Succeeded, Failed, Pending int
	Refunds                             int
	// RefundsPerCharge counts refunds by the charge's provider txn id.
	RefundsPerCharge map[string]int
	// RefundedAmount sums refunds by the charge's provider txn id.
	RefundedAmount map[string]int64
	// Deliveries counts webhook deliveries that berth answered 2xx.
	Deliveries int
	// APICalls counts POST /charges and /refunds calls, repeats included.
	APICalls int
}

// Sim is a simulated gateway. It implements payment.Gateway for use in
// process, and serves the HTTP protocol with Handler.
type Sim struct {
	mu      sync.Mutex
	opts    Options
	charges map[string]*charge
	order   []string          // txn ids, oldest first
	keys    map[string]string // idempotency key → txn or refund id
	// refundKeys are the refund keys of keys, oldest first.
	refundKeys []string
	stats      Stats
	seq        int
	inflight   int
	idle       chan struct{} // closed while nothing is in flight

	ctx    context.Context
	cancel context.CancelFunc
	client *http.Client
}

var _ payment.Gateway = (*Sim)(nil)

// New returns a simulator; Close stops its deliveries.
func New(o Options) *Sim {
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MaxCharges <= 0 {
		o.MaxCharges = DefaultMaxCharges
	}
	if o.RetryFor <= 0 {
		o.RetryFor = 24 * time.Hour
	}
	if o.RetryWait <= 0 {
		o.RetryWait = time.Minute
	}
	ctx, cancel := context.WithCancel(context.Background())
	idle := make(chan struct{})
	close(idle)
	return &Sim{
		opts:    o,
		charges: map[string]*charge{},
		keys:    map[string]string{},
		stats:   Stats{RefundsPerCharge: map[string]int{}, RefundedAmount: map[string]int64{}},
		idle:    idle,
		ctx:     ctx,
		cancel:  cancel,
		client:  &http.Client{Timeout: 10 * time.Second},
	}
}

// Configure changes the knobs while the simulator runs.
func (s *Sim) Configure(f func(*Options)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.opts)
}

// SetBaseURL sets where checkout pages are served.
func (s *Sim) SetBaseURL(u string) {
	s.Configure(func(o *Options) { o.BaseURL = strings.TrimRight(u, "/") })
}

// SetWebhookURL sends every webhook to u, whatever URL a charge or refund
// asked for.
func (s *Sim) SetWebhookURL(u string) {
	s.Configure(func(o *Options) { o.WebhookURL = u })
}

func (s *Sim) options() Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts
}

// Run waits for ctx to end, then stops the simulator.
func (s *Sim) Run(ctx context.Context) {
	<-ctx.Done()
	s.Close()
}

// Close stops every scheduled outcome and delivery.
func (s *Sim) Close() { s.cancel() }

// Stats returns what the simulator did so far.
func (s *Sim) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.RefundsPerCharge = maps.Clone(s.stats.RefundsPerCharge)
	st.RefundedAmount = maps.Clone(s.stats.RefundedAmount)
	for _, c := range s.charges {
		switch c.state {
		case pending:
			st.Pending++
		case succeeded:
			st.Succeeded++
		case failed:
			st.Failed++
		}
	}
	return st
}

// PendingCharges returns the provider ids of the charges nobody decided
// yet, oldest first.
func (s *Sim) PendingCharges() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, txn := range s.order {
		if s.charges[txn].state == pending {
			out = append(out, txn)
		}
	}
	return out
}

// Idle waits until no outcome or delivery is scheduled or in flight.
func (s *Sim) Idle(ctx context.Context) error {
	for {
		s.mu.Lock()
		idle, n := s.idle, s.inflight
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("paysim: %d deliveries still in flight: %w", n, ctx.Err())
		}
	}
}

// begin and end count work in flight; callers hold s.mu.
func (s *Sim) begin() {
	if s.inflight == 0 {
		s.idle = make(chan struct{})
	}
	s.inflight++
}

func (s *Sim) end() {
	s.inflight--
	if s.inflight == 0 {
		close(s.idle)
	}
}

// later runs f after delay in the background, counted as work in flight
// (Idle waits for it); f does not run once the simulator is closed. The
// caller holds s.mu.
func (s *Sim) later(delay time.Duration, f func()) {
	s.begin()
	go func() {
		defer func() { s.mu.Lock(); s.end(); s.mu.Unlock() }()
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(delay):
		}
		f()
	}()
}

// id returns a new identifier: 128 random bits, so that a checkout page's
// address cannot be guessed from another's.
func (s *Sim) id(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s_%d_%016x%016x", prefix, s.seq, rand.Uint64(), rand.Uint64())
}

// Charge starts a charge; the same key returns the same charge.
func (s *Sim) Charge(_ context.Context, key string, r payment.ChargeRequest) (payment.ChargeResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.APICalls++
	if txn, ok := s.keys["charge "+key]; ok {
		return s.chargeResult(txn), nil
	}
	if s.opts.WebhookURL != "" {
		r.WebhookURL = s.opts.WebhookURL // not the caller's, and not stored twice
	}
	c := &charge{txn: s.id("txn"), req: r, key: "charge " + key, created: time.Now()}
	s.charges[c.txn] = c
	s.order = append(s.order, c.txn)
	s.keys[c.key] = c.txn
	s.stats.Charges++
	s.evictLocked()
	if s.opts.Auto {
		ok := rand.Float64() >= s.opts.FailShare
		s.later(jitter(s.opts.PayDelay), func() { s.Settle(c.txn, ok) })
	}
	return s.chargeResult(c.txn), nil
}

func (s *Sim) chargeResult(txn string) payment.ChargeResult {
	return payment.ChargeResult{ProviderTxnID: txn, CheckoutURL: s.opts.BaseURL + "/checkout/" + txn}
}

// Settle decides a pending charge, as the customer's click on the checkout
// page does, and sends its webhook. It reports false for an unknown or
// already decided charge.
func (s *Sim) Settle(txn string, ok bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, found := s.charges[txn]
	if !found || c.state != pending {
		return false
	}
	typ := payment.ChargeFailed
	c.state = failed
	if ok {
		typ, c.state = payment.ChargeSucceeded, succeeded
	}
	s.sendLocked(c.req.WebhookURL, payment.Webhook{Type: typ, Data: payment.WebhookData{
		BookingID: c.req.BookingID, ProviderTxnID: txn, Amount: c.req.Amount, Currency: c.req.Currency,
	}})
	return true
}

// Refund refunds (part of) a charge; the same key returns the same refund.
// A charge it does not know is refunded all the same: in-process
// simulators of several berth processes do not share their charges.
func (s *Sim) Refund(_ context.Context, key string, r payment.GatewayRefundRequest) (payment.RefundResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.APICalls++
	if id, ok := s.keys["refund "+key]; ok {
		return payment.RefundResult{RefundID: id}, nil
	}
	id := s.id("rf")
	s.keys["refund "+key] = id
	s.refundKeys = append(s.refundKeys, "refund "+key)
	s.evictLocked()
	s.stats.Refunds++
	s.stats.RefundsPerCharge[r.ProviderTxnID]++
	s.stats.RefundedAmount[r.ProviderTxnID] += r.Amount
	w := payment.Webhook{Type: payment.RefundSucceeded, Data: payment.WebhookData{
		BookingID: r.BookingID, ProviderTxnID: id, Amount: r.Amount, Currency: r.Currency,
	}}
	s.later(jitter(s.opts.RefundDelay), func() {
		s.mu.Lock()
		s.sendLocked(r.WebhookURL, w)
		s.mu.Unlock()
	})
	return payment.RefundResult{RefundID: id}, nil
}

// evictLocked forgets the oldest charges and refund keys beyond
// MaxCharges: decided charges first, then pending ones (whose holds berth
// lets expire). Callers hold s.mu.
func (s *Sim) evictLocked() {
	limit := s.opts.MaxCharges
	for len(s.order) > limit {
		i := slices.IndexFunc(s.order, func(txn string) bool { return s.charges[txn].state != pending })
		if i < 0 {
			i = 0
		}
		txn := s.order[i]
		s.order = slices.Delete(s.order, i, i+1)
		delete(s.keys, s.charges[txn].key)
		delete(s.charges, txn)
		delete(s.stats.RefundsPerCharge, txn)
		delete(s.stats.RefundedAmount, txn)
	}
	for len(s.refundKeys) > limit {
		delete(s.keys, s.refundKeys[0])
		s.refundKeys = s.refundKeys[1:]
	}
	// Refunds of charges this simulator never knew (another process's)
	// are counted by txn too; keep those maps bounded as well.
	if len(s.stats.RefundsPerCharge) > 2*limit {
		for txn := range s.stats.RefundsPerCharge {
			if _, ok := s.charges[txn]; !ok {
				delete(s.stats.RefundsPerCharge, txn)
				delete(s.stats.RefundedAmount, txn)
			}
		}
	}
}

// sendLocked schedules the deliveries of one webhook: between 1 and
// MaxDeliveries copies with the same webhook-id, each after its own random
// delay. Callers hold s.mu.
func (s *Sim) sendLocked(url string, w payment.Webhook) {
	if s.opts.WebhookURL != "" {
		url = s.opts.WebhookURL
	}
	body, err := json.Marshal(w)
	if err != nil {
		panic(err) // a struct of strings and numbers always marshals
	}
	msgID := s.id("msg")
	copies := 1
	if s.opts.MaxDeliveries > 1 {
		copies += rand.IntN(s.opts.MaxDeliveries)
	}
	for range copies {
		delay := jitter(s.opts.Reorder)
		if s.opts.LateShare > 0 && rand.Float64() < s.opts.LateShare {
			delay += s.opts.LateBy
		}
		s.begin()
		go func() {
			defer func() { s.mu.Lock(); s.end(); s.mu.Unlock() }()
			s.deliver(url, msgID, body, delay)
		}()
	}
}

// deliver posts one copy of a webhook after delay, retrying until berth
// answers 2xx, as gateways do: at once, then at growing intervals (at most
// RetryWait apart) for RetryFor, so that money taken while berth was down
// for a while still reaches it (a real gateway retries for days).
func (s *Sim) deliver(url, msgID string, body []byte, delay time.Duration) {
	wait := 50 * time.Millisecond
	giveUp := time.Now().Add(s.options().RetryFor)
	for time.Now().Before(giveUp) {
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(delay):
		}
		o := s.options()
		req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			o.Log.Error("paysim: webhook", "url", url, "err", err)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		payment.SignHeaders(req.Header, o.Key, msgID, o.Clock.Now(), body)
		resp, err := s.client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				s.mu.Lock()
				s.stats.Deliveries++
				s.mu.Unlock()
				return
			}
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		o.Log.Warn("paysim: webhook delivery failed; retrying", "url", url, "id", msgID, "err", err)
		delay, wait = wait, min(wait*2, o.RetryWait)
	}
	s.options().Log.Error("paysim: webhook given up", "url", url, "id", msgID)
}

func jitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return rand.N(max + 1)
}
