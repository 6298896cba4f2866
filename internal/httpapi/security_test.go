package httpapi_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
)

// Requests without a valid token are limited per client address before
// authentication runs, so an unauthenticated flood costs berth no token
// checks and no database; the simulator's pages are limited the same way.
func TestAddressLimitRunsBeforeAuthentication(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) {
		c.AddressLimit = config.Rate{N: 5, Window: time.Minute}
	}})
	var statuses []int
	for range 8 {
		r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/bookings", Token: "not-a-token"})
		statuses = append(statuses, r.Status)
		if r.Status == http.StatusTooManyRequests && (r.Code() != "rate_limited" || r.Header.Get("Retry-After") == "") {
			t.Errorf("429 without rate_limited and Retry-After: %v %s", r.Header, r.Body)
		}
	}
	want := []int{401, 401, 401, 401, 401, 429, 429, 429}
	if !equal(statuses, want) {
		t.Errorf("unauthenticated flood from one address: %v, want %v", statuses, want)
	}
	// Nor are paths no route serves a way around it, nor the mux's
	// redirects of paths not in canonical form.
	// (Not following the redirect: its target would be limited anyway.)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range []string{"/no/such/path", "//airports", "/x/../airports", "/app"} {
		req, err := http.NewRequest(http.MethodGet, s.URL+p, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = "//" + req.URL.Host + p // sent as written, not cleaned by the client
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("%s from a limited address: %d, want 429", p, resp.StatusCode)
		}
	}
	if r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/paysim/checkout/txn_1"}); r.Status != http.StatusTooManyRequests {
		t.Errorf("the simulator's page from a limited address: %d, want 429", r.Status)
	}
	// The gateway's signed webhooks are never limited by address.
	if r := s.Do(apptest.Request{Method: http.MethodPost, Path: "/payments/webhook", Body: `{}`}); r.Status != http.StatusUnauthorized {
		t.Errorf("webhook from a limited address: %d, want 401 (checked, not limited)", r.Status)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// 401 names the scheme (RFC 6750), and the scheme's name is
// case-insensitive (RFC 9110).
func TestBearerChallengeAndScheme(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	tok := s.Token("customer", 7)
	for _, c := range []struct {
		auth      string
		want      int
		challenge string
	}{
		{"", 401, `Bearer realm="berth"`},
		{"Bearer garbage", 401, `Bearer realm="berth", error="invalid_token"`},
		{"Basic dXNlcjpwYXNz", 401, `Bearer realm="berth", error="invalid_token"`},
		{"Bearer", 401, `Bearer realm="berth", error="invalid_token"`},
		{"Bearer " + tok, 200, ""},
		{"bearer " + tok, 200, ""},
		{"BEARER  " + tok, 200, ""},
	} {
		r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/bookings", Header: map[string]string{"Authorization": c.auth}})
		if r.Status != c.want || r.Header.Get("WWW-Authenticate") != c.challenge {
			t.Errorf("Authorization %.20q: %d, WWW-Authenticate %q; want %d, %q", c.auth, r.Status, r.Header.Get("WWW-Authenticate"), c.want, c.challenge)
		}
	}
	// Two Authorization headers, whichever comes first, are refused: a
	// proxy reading the other one would see another caller.
	admin := s.Token("admin", 1)
	for _, pair := range [][2]string{{tok, admin}, {admin, tok}, {tok, tok}} {
		req, err := http.NewRequest(http.MethodGet, s.URL+"/bookings", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Add("Authorization", "Bearer "+pair[0])
		req.Header.Add("Authorization", "Bearer "+pair[1])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 401 || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("two Authorization headers: %d %s, want 401 application/problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
}

// Every answer says not to sniff its type, never to be framed, and to send
// no referrer: API answers, errors, the web app, the simulator's pages.
func TestSecurityHeadersOnEveryAnswer(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	for _, req := range []apptest.Request{
		{Method: http.MethodGet, Path: "/healthz"},
		{Method: http.MethodGet, Path: "/flights?from=SGN&to=HAN"},
		{Method: http.MethodGet, Path: "/no/such/thing"},
		{Method: http.MethodGet, Path: "/bookings"},
		{Method: http.MethodPost, Path: "/payments/webhook", Body: `{}`},
		{Method: http.MethodGet, Path: "/"},
		{Method: http.MethodGet, Path: "/app/flights/1"},
		{Method: http.MethodGet, Path: "/paysim/checkout/txn_nope"},
		{Method: http.MethodGet, Path: "/openapi.yaml"},
	} {
		r := s.Do(req)
		h := r.Header
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" ||
			!strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s %s → %d: headers %v, want nosniff, DENY, frame-ancestors 'none', no-referrer", req.Method, req.Path, r.Status, h)
		}
	}
}

// Behind trusted proxies (BERTH_TRUSTED_PROXIES) each client is limited on
// its own, by the address the nearest proxy appended to X-Forwarded-For;
// entries a client wrote itself, and the header from a peer that is not a
// trusted proxy, change nothing.
func TestAddressLimitBehindTrustedProxies(t *testing.T) {
	t.Parallel()
	start := func(proxies ...string) *apptest.Server {
		return apptest.Start(t, apptest.Options{Config: func(c *config.Config) {
			c.AddressLimit = config.Rate{N: 2, Window: time.Minute}
			for _, p := range proxies {
				px, err := config.ParsePrefix(p)
				if err != nil {
					t.Fatal(err)
				}
				c.TrustedProxies = append(c.TrustedProxies, px)
			}
		}})
	}
	statuses := func(s *apptest.Server, xff ...string) []int {
		var out []int
		for _, h := range xff {
			r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/airports", Header: map[string]string{"X-Forwarded-For": h}})
			out = append(out, r.Status)
		}
		return out
	}
	// The test's requests come from 127.0.0.1, here a proxy in front of
	// another (10.1.2.3) that appended the client's address.
	s := start("127.0.0.0/8", "10.1.2.3")
	got := statuses(s,
		"203.0.113.7", "203.0.113.7", "203.0.113.7", // one client: its third is over
		"198.51.100.9, 10.1.2.3", "6.6.6.6, 198.51.100.9, 10.1.2.3", // another, through both proxies, whatever it wrote itself
		"198.51.100.9, 10.1.2.3",                           // its third
		"2001:db8::7", "[2001:db8::7]", "2001:db8::7%eth0", // a third: one client however it is written
		"2001:db8:1::1", "2001:db8:1::2", "2001:db8:1:0:ffff::3", // a fourth: an IPv6 client is its /64
	)
	if want := []int{200, 200, 429, 200, 200, 429, 200, 200, 429, 200, 200, 429}; !equal(got, want) {
		t.Errorf("two clients behind trusted proxies: %v, want %v", got, want)
	}
	// Without trusted proxies the header is the client's own word: every
	// request counts against the peer.
	s = start()
	if got, want := statuses(s, "203.0.113.1", "203.0.113.2", "203.0.113.3"), []int{200, 200, 429}; !equal(got, want) {
		t.Errorf("X-Forwarded-For from an untrusted peer: %v, want %v", got, want)
	}
}

// Every answer carries X-Request-Id, the id berth logs the request's
// errors under: the caller's own when it is a plausible id (a proxy's),
// else a new one.
func TestRequestID(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	id := func(given string) string {
		r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/nowhere", Header: map[string]string{"X-Request-Id": given}})
		return r.Header.Get("X-Request-Id")
	}
	if got := id("edge-7f3a.1:2_b"); got != "edge-7f3a.1:2_b" {
		t.Errorf("a proxy's id came back as %q", got)
	}
	a, b := id(""), id("")
	if len(a) != 16 || a == b {
		t.Errorf("ids made for two requests without one: %q and %q, want two different 16-character ids", a, b)
	}
	for _, bad := range []string{"a b", "<script>", strings.Repeat("x", 129)} {
		if got := id(bad); got == bad || len(got) != 16 {
			t.Errorf("id %q came back as %q, want a new one", bad, got)
		}
	}
}

// A client that trickles request bodies holds connections, not the
// places of a lane: with more slow bodies in flight than the "other" lane
// has places, another customer's reads are still answered at once.
func TestSlowBodiesHoldNoLanePlace(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) {
		c.ShedWait = 200 * time.Millisecond
		c.DBMaxConns = 4 // the other lane: 4 places
	}})
	slow := s.Token("customer", 7001)
	for range 12 {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		// Headers and one byte of a 100-byte body; the rest never comes.
		fmt.Fprintf(conn, "POST /flights/1/waitlist HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", slow)
	}
	time.Sleep(100 * time.Millisecond) // let the server take them in
	for i := range 5 {
		r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/bookings", Token: s.Token("customer", 7002)})
		if r.Status != http.StatusOK {
			t.Fatalf("read %d with 12 slow bodies in flight: %d %s, want 200", i, r.Status, r.Body)
		}
	}
}
