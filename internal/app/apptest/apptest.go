// Package apptest starts berth for end-to-end tests: in this process with a
// fake clock (Start), or as real `berth serve` processes built from this
// tree (StartProcess), on fresh databases from pgtest. Tests then drive it
// over HTTP like any client.
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/pg/pgtest"
)

// Secrets used by every test server.
const (
	AuthSecret    = "test-auth-secret-0123456789"
	WebhookSecret = "whsec_dGVzdC13ZWJob29rLXNlY3JldC0wMTIz" // "test-webhook-secret-0123"
)

// Epoch is where every fake clock starts: a fixed instant, so tests read
// the same way on any day.
var Epoch = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// Server is a running berth and a client for it.
type Server struct {
	URL   string
	App   *app.App
	Clock *clock.Fake
	t     testing.TB
}

// Options tune Start.
type Options struct {
	DatabaseURL string // default: a fresh database
	Config      func(*config.Config)
	// Sweep runs the sweeper in the background at its interval (off by
	// default: tests call the sweeper themselves).
	Sweep bool
	// App adjusts the options berth is wired with (extra event consumers,
	// event settings).
	App func(*app.Options)
	// RedisURL and RedisPrefix point the surge layers at a shared Redis
	// (see SharedRedis); by default each server has its own embedded one.
	RedisURL, RedisPrefix string
}

// TestConfig returns the settings test servers start from. The surge
// layers are on, as in production, except the per-customer and per-client
// limits, which tests of other rules would trip over, and with a lenient
// shed wait, since a busy test machine is slow but not overloaded (tests of
// the limits and of shedding set their own), and with a small pool that
// keeps no idle connections open: the suite runs many servers at once
// against a PostgreSQL whose max_connections may be the default 100.
func TestConfig(dbURL string) config.Config {
	c := config.Defaults()
	c.HTTPAddr = "127.0.0.1:0"
	c.DatabaseURL = dbURL
	c.AuthSecret = AuthSecret
	c.WebhookSecret = WebhookSecret
	c.PaySim = true
	c.HoldLimit = config.Rate{}
	c.RequestLimit = config.Rate{}
	c.AddressLimit = config.Rate{}
	c.ShedWait = 5 * time.Second
	c.DBMaxConns = 10
	c.DBMinConns = 0
	return c
}

// Start runs berth in this process on a loopback port with a fake clock at
// Epoch, and stops it when t ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	if o.DatabaseURL == "" {
		o.DatabaseURL = pgtest.NewURL(t)
	}
	cfg := TestConfig(o.DatabaseURL)
	cfg.RedisURL = o.RedisURL
	if o.Config != nil {
		o.Config(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("apptest: config: %v", err)
	}
	fake := clock.NewFake(Epoch)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(context.Background())
	ao := app.Options{Clock: fake, Log: log, SeatMapTTL: time.Nanosecond, RedisPrefix: o.RedisPrefix}
	if o.App != nil {
		o.App(&ao)
	}
	a, err := app.New(ctx, cfg, ao)
	if err != nil {
		cancel()
		t.Fatalf("apptest: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatalf("apptest: listen: %v", err)
	}
	a.RunSweeper = o.Sweep
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("apptest: run: %v", err)
		}
		a.Close()
	})
	return &Server{URL: "http://" + ln.Addr().String(), App: a, Clock: fake, t: t}
}

// testWriter sends the server's warnings and errors to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// Token returns a bearer token for sub with role, valid for a day of the
// fake clock.
func (s *Server) Token(role string, sub int64) string {
	return Token(s.t, role, sub, s.Clock.Now())
}

// Token returns a bearer token signed with AuthSecret, valid from now for a
// day.
func Token(t testing.TB, role string, sub int64, now time.Time) string {
	t.Helper()
	tok, err := auth.Issue([]byte(AuthSecret), sub, role, now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Response is an answer, fully read.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test when it cannot.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

// Map returns the body as a JSON object.
func (r *Response) Map(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// Code returns the problem code of an error answer ("" for others).
func (r *Response) Code() string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.Body, &p)
	return p.Code
}

var client = &http.Client{
	Timeout:   60 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0},
}

// Request is one HTTP call. Body is sent as JSON unless it is a string or
// []byte, which are sent as they are.
type Request struct {
	Method, Path, Token string
	Body                any
	Header              map[string]string
}

// Do sends req to base and returns the answer; transport errors fail t.
func Do(t testing.TB, base string, req Request) *Response {
	t.Helper()
	var body io.Reader
	switch b := req.Body.(type) {
	case nil:
	case string:
		body = bytes.NewBufferString(b)
	case []byte:
		body = bytes.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(buf)
	}
	hr, err := http.NewRequest(req.Method, base+req.Path, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if req.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+req.Token)
	}
	for k, v := range req.Header {
		hr.Header.Set(k, v)
	}
	resp, err := client.Do(hr)
	if err != nil {
		t.Errorf("%s %s: %v", req.Method, req.Path, err)
		return &Response{Status: 0}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: read body: %v", req.Method, req.Path, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Do sends req to s.
func (s *Server) Do(req Request) *Response {
	s.t.Helper()
	return Do(s.t, s.URL, req)
}
