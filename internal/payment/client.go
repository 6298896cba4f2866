package payment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"berth.dev/berth/internal/fault"
)

// ClientOptions tune Client. Zero values take the defaults in brackets.
type ClientOptions struct {
	// AttemptTimeout bounds one HTTP attempt [5s].
	AttemptTimeout time.Duration
	// Attempts is how often a call is tried, all under the same
	// idempotency key [3].
	Attempts int
	// Backoff is the wait before the second attempt, doubled after each
	// further one, with jitter [200ms].
	Backoff time.Duration
	// TripAfter consecutive failed attempts open the circuit [5]; it stays
	// open for OpenFor [10s] and then lets one probe through.
	TripAfter int
	OpenFor   time.Duration
	// Registry receives the client's metrics when set.
	Registry prometheus.Registerer
}

// Client is the Gateway at a base URL, speaking docs/api.md's gateway protocol.
// Every call carries its idempotency key on every attempt, so a retry after
// a timeout never charges or refunds twice. Attempts that fail for the
// gateway's reasons (network errors, timeouts, 5xx, 429) are retried with
// backoff and counted by a circuit breaker, which, once open, fails calls at
// once with fault.Overloaded instead of hammering a gateway that is down.
type Client struct {
	base    string
	http    *http.Client
	opts    ClientOptions
	breaker *gobreaker.CircuitBreaker[[]byte]
	calls   *prometheus.CounterVec
}

// NewClient returns a client for the gateway at base.
func NewClient(base string, o ClientOptions) *Client {
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = 5 * time.Second
	}
	if o.Attempts <= 0 {
		o.Attempts = 3
	}
	if o.Backoff <= 0 {
		o.Backoff = 200 * time.Millisecond
	}
	if o.TripAfter <= 0 {
		o.TripAfter = 5
	}
	if o.OpenFor <= 0 {
		o.OpenFor = 10 * time.Second
	}
	c := &Client{
		base: strings.TrimRight(base, "/"),
		http: &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: o.AttemptTimeout,
		}},
		opts: o,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_gateway_attempts_total", Help: "HTTP attempts at the payment gateway, by call and result.",
		}, []string{"call", "result"}),
	}
	trip := uint32(o.TripAfter)
	c.breaker = gobreaker.NewCircuitBreaker[[]byte](gobreaker.Settings{
		Name:        "gateway",
		MaxRequests: 1,
		Timeout:     o.OpenFor,
		ReadyToTrip: func(n gobreaker.Counts) bool { return n.ConsecutiveFailures >= trip },
		// A refusal of the request itself (4xx) is the gateway working.
		IsSuccessful: func(err error) bool {
			var re *rejectedError
			return err == nil || errors.As(err, &re)
		},
		// The caller giving up says nothing about the gateway.
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
	})
	if o.Registry != nil {
		state := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "berth_gateway_circuit_open", Help: "1 while the payment gateway's circuit is open (calls fail fast).",
		}, func() float64 {
			if c.breaker.State() == gobreaker.StateOpen {
				return 1
			}
			return 0
		})
		o.Registry.MustRegister(c.calls, state)
	}
	return c
}

// Charge starts a charge (POST /charges).
func (c *Client) Charge(ctx context.Context, key string, r ChargeRequest) (ChargeResult, error) {
	var out ChargeResult
	if err := c.call(ctx, "charges", key, r, &out); err != nil {
		return out, err
	}
	if out.ProviderTxnID == "" {
		return out, fmt.Errorf("gateway charge: the answer has no providerTxnId")
	}
	return out, nil
}

// Refund asks for a refund (POST /refunds).
func (c *Client) Refund(ctx context.Context, key string, r GatewayRefundRequest) (RefundResult, error) {
	var out RefundResult
	if err := c.call(ctx, "refunds", key, r, &out); err != nil {
		return out, err
	}
	if out.RefundID == "" {
		return out, fmt.Errorf("gateway refund: the answer has no refundId")
	}
	return out, nil
}

// rejectedError is the gateway refusing a request (4xx other than 429):
// trying again would not help.
type rejectedError struct {
	status int
	body   string
}

func (e *rejectedError) Error() string {
	return fmt.Sprintf("the gateway refused the request: %d %s", e.status, e.body)
}

// retryAfterError is a retryable answer that says when to come back.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

func (c *Client) call(ctx context.Context, path, key string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("gateway %s: %w", path, err)
	}
	wait := c.opts.Backoff
	var last error
	for attempt := 1; attempt <= c.opts.Attempts; attempt++ {
		answer, err := c.breaker.Execute(func() ([]byte, error) { return c.attempt(ctx, path, key, body) })
		switch {
		case err == nil:
			c.calls.WithLabelValues(path, "ok").Inc()
			if err := json.Unmarshal(answer, out); err != nil {
				return fmt.Errorf("gateway %s: decode answer: %w", path, err)
			}
			return nil
		case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
			c.calls.WithLabelValues(path, "circuit_open").Inc()
			return unavailable(c.opts.OpenFor, err)
		}
		var rejected *rejectedError
		if errors.As(err, &rejected) {
			c.calls.WithLabelValues(path, "rejected").Inc()
			return fmt.Errorf("gateway %s: %w", path, err)
		}
		c.calls.WithLabelValues(path, "failed").Inc()
		last = err
		if ctx.Err() != nil || attempt == c.opts.Attempts {
			break
		}
		pause := wait/2 + rand.N(wait/2+1)
		var ra *retryAfterError
		if errors.As(err, &ra) && ra.after > pause && ra.after <= 5*wait {
			pause = ra.after
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		wait *= 2
	}
	if ctx.Err() != nil {
		err := fmt.Errorf("gateway %s: %w", path, errors.Join(last, ctx.Err()))
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The caller's time ran out waiting for the gateway (a
			// request's deadline): the gateway's fault, said as such, not
			// left to read as a busy database.
			return gatewayDown("the payment gateway did not answer in time; try again later", 5*time.Second, err)
		}
		return err
	}
	return unavailable(5*time.Second, fmt.Errorf("gateway %s after %d attempts: %w", path, c.opts.Attempts, last))
}

// unavailable is the fault of a gateway that cannot take calls now.
func unavailable(retryAfter time.Duration, err error) error {
	return gatewayDown("the payment gateway is unavailable; try again later", retryAfter, err)
}

// gatewayDown is a 503 overloaded that says why, caused by err.
func gatewayDown(detail string, retryAfter time.Duration, err error) error {
	return &fault.Error{Code: fault.Overloaded, Detail: detail, RetryAfter: retryAfter, Err: err}
}

// attempt makes one HTTP request and returns the body of a 2xx answer.
func (c *Client) attempt(ctx context.Context, path, key string, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/"+path, bytes.NewReader(body))
	if err != nil {
		return nil, &rejectedError{status: 0, body: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return answer, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 ||
		resp.StatusCode == http.StatusConflict: // the same key still being processed
		err := fmt.Errorf("gateway answered %d", resp.StatusCode)
		if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s >= 0 {
			return nil, &retryAfterError{err: err, after: time.Duration(s) * time.Second}
		}
		return nil, err
	}
	return nil, &rejectedError{status: resp.StatusCode, body: string(bytes.TrimSpace(answer[:min(len(answer), 200)]))}
}
