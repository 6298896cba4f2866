// Package config reads berth's settings: defaults, then BERTH_* environment
// variables, then command-line flags, then Validate, which names each
// wrong setting. Every setting is one entry of one list (settings.go),
// from which all of these, the -h text and the README's table are made.
package config

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is the settings of `berth serve` (docs/api.md, "The binary").
type Config struct {
	HTTPAddr        string
	DatabaseURL     string
	DatabaseReadURL string
	RedisURL        string
	KafkaBrokers    []string
	AuthSecret      string
	WebhookSecret   string
	GatewayURL      string
	// PaySim runs the built-in payment simulator in process instead of a
	// gateway (BERTH_PAYSIM=on): only on loopback listen addresses, since
	// anyone who reaches it can decide any charge.
	PaySim bool
	// PickupEarly is how long before a rental's start the host may hand
	// the car over (BERTH_PICKUP_EARLY).
	PickupEarly   time.Duration
	PublicURL     string // where the gateway reaches berth; "" = the listen address
	FlightHoldTTL time.Duration
	CarHoldTTL    time.Duration
	// HoldExtension is how much later one extension moves a hold's
	// deadline (BERTH_HOLD_EXTENSION); WaitlistOfferTTL is how long a
	// waitlist offer's hold lasts (BERTH_WAITLIST_OFFER_TTL).
	HoldExtension    time.Duration
	WaitlistOfferTTL time.Duration
	SweepInterval    time.Duration
	HoldLimit        Rate
	DBMaxConns       int
	// DBMinConns is how many of the pool's connections are kept open when
	// idle (at most DBMaxConns), so a sale's first second does not wait
	// for new PostgreSQL backends.
	DBMinConns int
	Migrate    bool
	LogLevel   string
	// Protect turns on the surge layers in front of the database (waiting
	// room, seat gate, sold-out hint, hold coalescing, load shedding).
	// Off, berth runs the bare design: one transaction per request.
	// The rules hold either way; `berth bench` compares the two.
	Protect bool
	// FareBuckets is how many counter rows a new fare class's quota is
	// split over, unless the admin says otherwise.
	FareBuckets int
	// HoldBatch is the most holds of one flight coalesced into one
	// transaction (with Protect).
	HoldBatch int
	// HoldFlushes is how many batches of one flight's holds this process
	// may have in the database at once (with Protect).
	HoldFlushes int
	// HoldConns is how many database connections holds may have at once
	// in this process (with Protect), at most all but a quarter of the
	// pool: about the database's cores over berth's processes.
	HoldConns int
	Events    Events
	// RequestLimit is each client's request rate on every route (by token
	// subject, else client address); Rate{} ("off") turns it off.
	RequestLimit Rate
	// AddressLimit is each client address's request rate on every route
	// but the probes and the webhook, counted before authentication, so
	// that floods without a valid token are turned away too; generous,
	// since many customers may share one address. Rate{} turns it off.
	AddressLimit Rate
	// TrustedProxies are the addresses or CIDR ranges of the proxies in
	// front of berth, whose X-Forwarded-For names the client.
	TrustedProxies []netip.Prefix
	// ShedWait is how long a request may wait for a database connection or
	// a slot of its route's concurrency limit before it is answered 503
	// overloaded instead of queueing.
	ShedWait time.Duration
	// AuditInterval is how often serve and worker check the invariants
	// and export berth_audit_violations (0 turns it off). Processes that
	// share a database audit once per interval between them.
	AuditInterval time.Duration
	// ReadMaxLag is how far the read replica may lag before searches and
	// seat maps read from the primary instead.
	ReadMaxLag time.Duration

	// Worker is set for `berth worker` (by LoadFlags, from its flag set's
	// name); Validate holds a worker to what it needs besides serve's
	// settings (BERTH_PUBLIC_URL). It is not a setting.
	Worker bool
}

// Rate is a count per window, written "3/15m"; the zero Rate, written
// "off", means no limit.
type Rate struct {
	N      int
	Window time.Duration
}

// Off reports whether r sets no limit.
func (r Rate) Off() bool { return r.N == 0 }

func (r Rate) String() string {
	if r.Off() {
		return "off"
	}
	return fmt.Sprintf("%d/%s", r.N, shortDuration(r.Window))
}

// Set parses "N/window" or "off".
func (r *Rate) Set(s string) error {
	if strings.EqualFold(s, "off") {
		*r = Rate{}
		return nil
	}
	n, w, ok := strings.Cut(s, "/")
	if !ok {
		return fmt.Errorf("%q is not a rate like 3/15m", s)
	}
	count, err := strconv.Atoi(n)
	if err != nil || count < 1 {
		return fmt.Errorf("%q is not a rate like 3/15m", s)
	}
	// A window under a millisecond counts nothing the clocks can tell
	// apart: 5/1ns would be no limit at all.
	window, err := time.ParseDuration(w)
	if err != nil || window < time.Millisecond {
		return fmt.Errorf("%q is not a rate like 3/15m (a window of at least 1ms)", s)
	}
	r.N, r.Window = count, window
	return nil
}

// shortDuration writes d without zero minutes and seconds: 15m, 1h, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Defaults returns the settings before environment and flags.
func Defaults() Config {
	var c Config
	for _, s := range c.settings() {
		if s.def != "" {
			if err := s.v.set(s.def); err != nil {
				panic("config: the default of " + s.name() + ": " + err.Error())
			}
		}
	}
	return c
}

// Load returns the settings from getenv and args (flags of `berth serve`).
func Load(args []string, getenv func(string) string) (Config, error) {
	return LoadFlags(flag.NewFlagSet("serve", flag.ContinueOnError), args, getenv)
}

// LoadFlags is Load parsing args with fs, the flag set of the command
// that takes serve's settings (its name and -h text are the caller's): a
// flag set named "worker" loads the settings of `berth worker`.
func LoadFlags(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	c := Defaults()
	c.Worker = fs.Name() == "worker"
	if err := c.fromEnv(getenv); err != nil {
		return c, err
	}
	c.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return c, c.Validate()
}

// LoadSome is LoadFlags for a command that takes only some of serve's
// settings, named by their variables, beside flags of its own already on
// fs: their defaults, then getenv, then args (a secret by the flag the
// one-off commands give it). It checks each by its own
// rules, not by those that involve settings the command does not take.
func LoadSome(fs *flag.FlagSet, args []string, getenv func(string) string, envs ...string) (Config, error) {
	c := Defaults()
	var some []setting
	for _, env := range envs {
		s, ok := c.setting(env)
		if !ok {
			panic("config: no setting " + env)
		}
		if v := getenv(env); v != "" {
			if err := s.v.set(v); err != nil {
				return c, fmt.Errorf("%s: %w", env, err)
			}
		}
		if s.flag == "" {
			s.flag = s.cmdFlag
		}
		s.register(fs)
		some = append(some, s)
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var errs []error
	for _, s := range some {
		if err := s.v.valid(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name(), err))
		}
	}
	return c, errors.Join(errs...)
}

// setting is the setting of variable env.
func (c *Config) setting(env string) (setting, bool) {
	for _, s := range c.settings() {
		if s.env == env {
			return s, true
		}
	}
	return setting{}, false
}

// fromEnv sets each setting whose variable getenv gives (an empty one is
// unset).
func (c *Config) fromEnv(getenv func(string) string) error {
	for _, s := range c.settings() {
		if s.env == "" {
			continue
		}
		if v := getenv(s.env); v != "" {
			if err := s.v.set(v); err != nil {
				return fmt.Errorf("%s: %w", s.env, err)
			}
		}
	}
	return nil
}

// Flags registers the settings as flags on fs, with the current values as
// defaults, so flags override the environment. Secrets show masked.
func (c *Config) Flags(fs *flag.FlagSet) {
	for _, s := range c.settings() {
		s.register(fs)
	}
}

// Validate names every setting that cannot work.
func (c *Config) Validate() error {
	var errs []error
	for _, s := range c.settings() {
		errs = append(errs, s.validate()...)
	}
	return errors.Join(errs...)
}

// WebhookKey decodes a Standard Webhooks secret, "whsec_" and base64, into
// the HMAC key.
func WebhookKey(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, errors.New(`is required, of the form "whsec_" followed by base64`)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(key) < 16 {
		return nil, errors.New("the part after whsec_ must be base64 of at least 16 bytes")
	}
	return key, nil
}

// IsLoopback reports whether the listen address addr (host:port) accepts
// connections from this machine only: localhost or a loopback IP. An empty
// host (":8080") listens on every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func isURL(s string, schemes ...string) bool {
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	for _, sc := range schemes {
		if u.Scheme == sc {
			return true
		}
	}
	return false
}

func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	out := strings.Split(s, ",")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// Unknown returns a warning for each BERTH_ variable in environ (as
// os.Environ lists them) that is no setting, naming the setting it is
// probably a misspelling of: an unknown variable is otherwise ignored in
// silence, and a misspelt BERTH_HOLD_LIMIT leaves the default in force.
// The test harness's own variables (BERTH_TEST_…) are not settings and
// are not warned about.
func Unknown(environ []string) []string {
	var c Config
	known := map[string]bool{}
	for _, s := range c.settings() {
		if s.env != "" {
			known[s.env] = true
		}
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "BERTH_") || known[name] || strings.HasPrefix(name, "BERTH_TEST_") {
			continue
		}
		w := name + " is not a setting of berth and is ignored"
		// A misspelling is a few edits away: two, or one in six
		// characters of a long name (BERTH_TRUSTED_PROXY).
		best, bestD := "", max(2, len(name)/6)+1
		for k := range known {
			if d := editDistance(name, k); d < bestD || d == bestD && k < best {
				best, bestD = k, d
			}
		}
		if best != "" {
			w += "; did you mean " + best + "?"
		}
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// ParsePrefix reads an address ("10.0.0.7", "::1") as the range of it
// alone, or a CIDR range ("10.0.0.0/8").
//
// An IPv4 address written in IPv6's mapped form (::ffff:10.0.0.7, or a
// range of them from /96 on) is read as the IPv4 one, since that is how
// a peer's address is compared; a zone is refused.
func ParsePrefix(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, err
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q has a zone", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}
