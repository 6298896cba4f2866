// Package httpapi serves berth's public HTTP API (docs/api.md): routing,
// authentication, strict decoding, problem+json errors and metrics. Handlers
// are thin: they decode, call a domain package and encode.
package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"path"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/audit"
	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/flight"
	"berth.dev/berth/internal/guard"
	"berth.dev/berth/internal/idempotency"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/rental"
)

// Deps is what the API serves from.
type Deps struct {
	Log       *slog.Logger
	Clock     clock.Clock
	Pool      *pgxpool.Pool
	Flights   *flight.Service
	Cars      *rental.Service
	Lifecycle *booking.Lifecycle
	// Keys stores the answers of requests made under an Idempotency-Key.
	Keys       *idempotency.Store
	AuthSecret []byte
	// HoldExtension is what POST /bookings/{id}/extend adds to a hold
	// (BERTH_HOLD_EXTENSION; default 5m).
	HoldExtension time.Duration
	// Ready lists the dependencies /readyz checks besides the database.
	Ready    map[string]func(context.Context) error
	Registry *prometheus.Registry

	// Payments serves payments and the gateway's webhooks; PaySim, when
	// set, is the built-in gateway simulator, served under /paysim/ (its
	// checkout pages).
	Payments *payment.Service
	PaySim   http.Handler
	// Guard is the surge layers (waiting room, gate, limits, shedding);
	// nil or off lets every request straight through.
	Guard *guard.Guard

	// Consumers names the event consumers whose lag GET /admin/events
	// shows; Audit is how POST /admin/audit checks (its Now is set per
	// run).
	Consumers []string
	Audit     audit.Options
	// TrustedProxies are the proxies in front of berth
	// (BERTH_TRUSTED_PROXIES): a request from one of them is counted
	// against the client its X-Forwarded-For names (clientAddr).
	TrustedProxies []netip.Prefix

	// Dev serves GET /dev/login, which signs a browser in as anyone: only
	// for `berth dev`.
	Dev bool
}

// Server is the HTTP API.
type Server struct {
	Deps
	log    *slog.Logger
	mux    *http.ServeMux
	routes []Route // what mux serves: the route table
	// patterns are the routes' mux patterns: what else the mux answers
	// (its redirects of paths not in canonical form) is no route.
	patterns map[string]bool
	metrics  *metrics
	tokens   *tokenCache // verified bearer tokens, with the surge layers on
	assets   map[string]asset
	carJSON  sync.Map // car id → *encodedCar: its public JSON (publicCarJSON)
	// refusals limits the log lines of refused requests to one a second
	// for each message and route.
	refusals *lineLimit
	// readiness is each dependency's state at the last /readyz check, for
	// its log lines; ready is that check.
	readyMu   sync.Mutex
	readiness map[string]string
	ready     fresh[*readyCheck]
}

// New returns the API's handler.
func New(d Deps) *Server {
	if d.HoldExtension <= 0 {
		d.HoldExtension = 5 * time.Minute
	}
	s := &Server{Deps: d, log: d.Log, mux: http.NewServeMux(), patterns: map[string]bool{}, metrics: newMetrics(d.Registry),
		refusals: newLineLimit(time.Second), readiness: map[string]string{}}
	if d.Guard.On() {
		s.tokens = newTokenCache()
	}
	s.assets = loadAssets()
	for _, e := range s.table() {
		s.handle(e)
	}
	return s
}

// access says who may call a route: nobody needs a token (nil), any valid
// token, or a token with one of the roles.
type access []string

var (
	public  access = nil
	anyRole        = access{auth.Customer, auth.Host, auth.Admin}
)

func roles(r ...string) access { return r }

// handlerFunc is a handler that returns its error for the server to answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request, c auth.Caller) error

// handle registers e on the mux: the surge layers of its lane around
// authentication and its handler, and its Idempotency-Key handling.
func (s *Server) handle(e entry) {
	who, lane, h, bodiless := access(e.Roles), e.Lane, e.h, e.Bodiless
	if e.Idempotency != NoKey {
		h = s.idempotent(e.Idempotency, e.keyInEffect, e.keyLease, h)
	}
	s.mux.HandleFunc(e.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		var c auth.Caller
		addr := s.clientAddr(r)
		if err := s.Guard.AdmitAddress(r.Context(), lane, addr); err != nil {
			s.writeError(w, r, err)
			return
		}
		if who != nil {
			var err error
			if c, err = s.authenticate(r, who); err != nil {
				if fault.CodeOf(err) == fault.Unauthenticated {
					// RFC 6750: say which scheme, and whether a token was
					// given but is not valid.
					challenge := `Bearer realm="berth"`
					if r.Header.Get("Authorization") != "" {
						challenge += `, error="invalid_token"`
					}
					w.Header().Set("WWW-Authenticate", challenge)
				}
				s.writeError(w, r, err)
				return
			}
			// What a token reads is that caller's: no cache keeps it.
			w.Header().Set("Cache-Control", "no-store")
		}
		if err := checkInput(w, r, bodiless); err != nil {
			s.writeError(w, r, err)
			return
		}
		ctx, leave, err := s.Guard.Admit(r.Context(), lane, clientKey(addr, c, who))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		defer leave()
		r = r.WithContext(ctx)
		if err := h(w, r, c); err != nil {
			s.writeError(w, r, err)
		}
	})
	s.routes = append(s.routes, e.Route)
	s.patterns[e.Pattern()] = true
}

func (s *Server) authenticate(r *http.Request, who access) (auth.Caller, error) {
	// One header: with two, a proxy reading the last and berth the first
	// would each see another caller.
	if len(r.Header.Values("Authorization")) > 1 {
		return auth.Caller{}, fault.New(fault.Unauthenticated, "give one Authorization header, not several")
	}
	token, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return auth.Caller{}, fault.New(fault.Unauthenticated, "an Authorization: Bearer token is required")
	}
	verify := auth.Verify
	if s.tokens != nil {
		verify = s.tokens.verify
	}
	c, err := verify(s.AuthSecret, token, s.Clock.Now())
	if err != nil {
		return auth.Caller{}, &fault.Error{Code: fault.Unauthenticated, Detail: "the bearer token is invalid or expired", Err: err}
	}
	for _, role := range who {
		if c.Role == role {
			return c, nil
		}
	}
	return auth.Caller{}, fault.New(fault.Forbidden, "this needs the role %s", strings.Join(who, " or "))
}

// bearer returns the token of an Authorization header of the Bearer
// scheme, whose name is case-insensitive (RFC 9110, 11.1).
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimLeft(token, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// securityHeaders go on every answer: no content sniffing, never framed
// (the web app's own policy says frame-ancestors 'none' too), no referrer
// leaking booking ids to other sites.
func securityHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
}

// ServeHTTP routes r, records its metrics, and turns panics and the mux's own
// 404 and 405 answers into problem documents.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	securityHeaders(w.Header())
	w.Header().Set("X-Request-Id", requestID(r.Header.Get("X-Request-Id")))
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	h, pattern := s.mux.Handler(r)
	routed := s.patterns[pattern] && !redirected(r, pattern)
	defer func() {
		if p := recover(); p != nil {
			if err, ok := p.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(p)
			}
			s.log.Error("panic", "method", r.Method, "path", r.URL.Path, "request_id", w.Header().Get("X-Request-Id"),
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if !rec.wrote {
				s.writeError(rec, r, fmt.Errorf("panic: %v", p))
			}
		}
		route := pattern
		if !routed {
			route = "unmatched" // a bounded label, whatever the path
		}
		s.metrics.observe(route, rec.status, time.Since(start))
	}()
	if !routed {
		// No route took it (an unknown path, the mux's 405 or redirect):
		// it counts against the client's address like any request, so a
		// flood of made-up paths is no way around the limit.
		if err := s.Guard.AdmitAddress(r.Context(), guard.LaneOther, s.clientAddr(r)); err != nil {
			s.writeError(rec, r, err)
			return
		}
	}
	if pattern == "" {
		s.unmatched(rec, r, h)
		return
	}
	s.mux.ServeHTTP(rec, r)
}

// redirected reports whether the mux answers r, matched to pattern, with a
// redirect rather than the route's handler: a path not in canonical form
// (//airports, /a/../b), or a subtree's root without its slash (/app for
// the pattern /app/).
func redirected(r *http.Request, pattern string) bool {
	if r.Method == http.MethodConnect {
		return false
	}
	if cleanPath(r.URL.Path) != r.URL.Path {
		return true
	}
	_, patPath, _ := strings.Cut(pattern, " ")
	return strings.HasSuffix(patPath, "/") && !strings.HasPrefix(r.URL.Path, patPath)
}

// cleanPath is p as the mux serves it: rooted, without . and .. elements
// or repeated slashes, with its trailing slash kept.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// unmatched answers a request no route took: 405 with Allow when the path
// exists with other methods, 404 otherwise.
func (s *Server) unmatched(w http.ResponseWriter, r *http.Request, mux http.Handler) {
	probe := &recorder{ResponseWriter: discard{h: http.Header{}}, status: http.StatusOK}
	mux.ServeHTTP(probe, r)
	if probe.status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", probe.Header().Get("Allow"))
		s.writeError(w, r, fault.New(codeMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path))
		return
	}
	s.writeError(w, r, fault.New(fault.NotFound, "no such resource: %s", r.URL.Path))
}

type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

type discard struct{ h http.Header }

func (d discard) Header() http.Header       { return d.h }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request, _ auth.Caller) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// noteReadiness logs a dependency's readiness when it changes, not at
// every probe: a load balancer's and an orchestrator's probes come every
// few seconds from each of them.
func (s *Server) noteReadiness(name, state string, err error) {
	s.readyMu.Lock()
	was, seen := s.readiness[name]
	s.readiness[name] = state
	s.readyMu.Unlock()
	switch {
	case was == state || !seen && state == "ok":
	case state == "ok":
		s.log.Info("ready again", "dependency", name, "was", was)
	case state == "degraded":
		s.log.Warn("degraded", "dependency", name, "err", err)
	default:
		s.log.Warn("not ready", "dependency", name, "err", err)
	}
}

// ErrDegraded marks a readiness check's error as a dependency berth serves
// without: /readyz reports it "degraded" and stays 200, so the load
// balancer keeps the process.
var ErrDegraded = errors.New("degraded")

// readyFor is how long one readiness check answers /readyz: probes are
// never limited (an orchestrator's and a load balancer's come from their
// own addresses), so a flood of them costs one check of each dependency a
// second, whatever its rate, not a database and a Redis round trip each.
const readyFor = time.Second

// readyCheck is one check of every dependency: each one's state, and those
// unavailable.
type readyCheck struct {
	out  map[string]string
	down []string
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request, _ auth.Caller) error {
	res := s.ready.get(readyFor, s.checkReady)
	if len(res.down) > 0 {
		return &fault.Error{Code: fault.Overloaded, Detail: "not ready: " + strings.Join(res.down, ", ") + " unavailable",
			RetryAfter: 5 * time.Second, Extra: map[string]any{"checks": res.out}}
	}
	writeJSON(w, http.StatusOK, res.out)
	return nil
}

// checkReady checks the database and every dependency of Ready, within 2 s.
func (s *Server) checkReady() *readyCheck {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	checks := map[string]func(context.Context) error{}
	if s.Pool != nil {
		checks["database"] = s.Pool.Ping
	}
	for name, check := range s.Ready {
		checks[name] = check
	}
	res := &readyCheck{out: map[string]string{}}
	for name, check := range checks {
		err := check(ctx)
		switch {
		case errors.Is(err, ErrDegraded):
			res.out[name] = "degraded"
		case err != nil:
			res.out[name] = "unavailable"
			res.down = append(res.down, name)
		default:
			res.out[name] = "ok"
		}
		s.noteReadiness(name, res.out[name], err)
	}
	sort.Strings(res.down)
	return res
}

// requestID is the id a request is answered (X-Request-Id) and logged
// under: the caller's own when it looks like one (a proxy's or a client's,
// so that their logs and berth's meet), else a new one: this process's
// random prefix and a counter, 16 hex digits, with no system call on the
// request's path.
func requestID(given string) string {
	idChar := func(r rune) bool {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-_.:", r)
	}
	plausible := len(given) >= 1 && len(given) <= 128 && strings.IndexFunc(given, func(r rune) bool { return !idChar(r) }) < 0
	if plausible {
		return given
	}
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], requestIDPrefix)
	binary.BigEndian.PutUint32(b[4:], requestIDs.Add(1))
	return hex.EncodeToString(b[:])
}

// requestIDPrefix and requestIDs make the ids requestID makes: distinct
// within a process for 2³² requests, and between processes but by chance.
var (
	requestIDPrefix = func() uint32 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		return binary.BigEndian.Uint32(b[:])
	}()
	requestIDs atomic.Uint32
)
