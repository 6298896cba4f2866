package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// client is the load generator's HTTP client: one tuned transport shared
// by every simulated customer, keep-alive, enough idle connections that an
// open-loop burst never dials per request.
type client struct {
	http *http.Client
}

func newClient(maxConns int) *client {
	tr := &http.Transport{
		Proxy:                 nil, // loopback only: never through a proxy from the environment
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          0, // no global cap; the per-host ones below apply
		MaxIdleConnsPerHost:   maxConns,
		MaxConnsPerHost:       0,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		ExpectContinueTimeout: 0,
		WriteBufferSize:       8 << 10,
		ReadBufferSize:        8 << 10,
	}
	return &client{http: &http.Client{Transport: tr}}
}

func (c *client) close() { c.http.CloseIdleConnections() }

// call is one request.
type call struct {
	method, url, token string
	body               []byte
	header             map[string]string
	// decode asks for the answer's body to be parsed (problem code,
	// booking id, waiting-room ticket); without it the body is only
	// drained, and only error answers are parsed.
	decode bool
}

// answer is what came back: the status, the problem code and the fields the
// scenarios follow up on.
type answer struct {
	status int
	err    error // transport error: no answer
	fields answerFields
}

type answerFields struct {
	Code      string          `json:"code"`
	BookingID int64           `json:"bookingId"`
	Ticket    json.RawMessage `json:"ticket"`
	Position  int64           `json:"position"`
	Admitted  bool            `json:"admitted"`
	Token     string          `json:"token"`
	ID        int64           `json:"id"`
	// CheckoutURL is a payment's page at the gateway (the simulator).
	CheckoutURL string `json:"checkoutUrl"`
}

// ticket returns the waiting-room ticket as text, whether the server sent
// it as a JSON string or a number.
func (a *answerFields) ticket() string {
	var s string
	if json.Unmarshal(a.Ticket, &s) == nil {
		return s
	}
	return string(bytes.TrimSpace(a.Ticket))
}

func (a *answer) outcome() string { return outcomeOf(a.status, a.fields.Code, a.err) }

const maxAnswer = 1 << 20

func (c *client) do(ctx context.Context, k call) answer {
	var body io.Reader
	if k.body != nil {
		body = bytes.NewReader(k.body)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, k.url, body)
	if err != nil {
		return answer{err: fmt.Errorf("build request: %w", err)}
	}
	if k.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if k.token != "" {
		req.Header.Set("Authorization", "Bearer "+k.token)
	}
	for name, v := range k.header {
		req.Header.Set(name, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	if !k.decode && resp.StatusCode < 300 {
		// Drain, so the connection goes back to the pool.
		if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer)); err != nil {
			a.err = fmt.Errorf("read answer: %w", err)
		}
		return a
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		a.err = fmt.Errorf("read answer: %w", err)
		return a
	}
	// A body that is not JSON leaves the fields empty: the status alone
	// then names the outcome.
	_ = json.Unmarshal(b, &a.fields)
	return a
}

// must runs a setup request and fails unless it answered want.
//
// Setup competes with warm-up and background work for berth's database
// connections, so, like any well-behaved client, it waits and asks again
// when berth sheds it (503) or limits it (429), a bounded number of times.
func (c *client) must(ctx context.Context, k call, want int) (answerFields, error) {
	k.decode = true
	a := c.do(ctx, k)
	for try := 1; try < 20 && a.err == nil && (a.status == http.StatusServiceUnavailable ||
		(a.status == http.StatusTooManyRequests && a.fields.Code == "rate_limited")); try++ {
		sleepUntil(ctx, time.Now().Add(time.Duration(try)*50*time.Millisecond))
		a = c.do(ctx, k)
	}
	if a.err != nil {
		return a.fields, fmt.Errorf("%s %s: %w", k.method, k.url, a.err)
	}
	if a.status != want {
		return a.fields, &statusError{method: k.method, path: pathOf(k.url), status: a.status, code: a.fields.Code}
	}
	return a.fields, nil
}

// statusError is a setup request answered with an unexpected status.
type statusError struct {
	method, path string
	status       int
	code         string
}

func (e *statusError) Error() string {
	return e.method + " " + e.path + " answered " + strconv.Itoa(e.status) + " " + e.code
}

// pathOf drops the scheme and host (a port that changes every run) from a
// URL for messages.
func pathOf(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Path
	}
	return u
}

// missingRoute reports whether a setup answer means this build of berth
// has no such route yet (404 or 405 from the router).
func (e *statusError) missingRoute() bool {
	return e.status == http.StatusNotFound || e.status == http.StatusMethodNotAllowed
}
