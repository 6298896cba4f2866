// Package config reads berth's settings: defaults, then BERTH_* environment
// variables, then command-line flags, then Validate, which names the first
// wrong setting.
package config

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
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
	Events    Events
	// RequestLimit is each client's request rate on every route (by token
	// subject, else client address); Rate{} ("off") turns it off.
	RequestLimit Rate
	// AddressLimit is each client address's request rate on every route
	// but the probes and the webhook, counted before authentication, so
	// that floods without a valid token are turned away too; generous,
	// since many customers may share one address. Rate{} turns it off.
	AddressLimit Rate
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
	if s == "off" {
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
	window, err := time.ParseDuration(w)
	if err != nil || window <= 0 {
		return fmt.Errorf("%q is not a rate like 3/15m", s)
	}
	r.N, r.Window = count, window
	return nil
}

func shortDuration(d time.Duration) string {
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	return strings.TrimSuffix(s, "0m")
}

// Defaults returns the settings before environment and flags.
func Defaults() Config {
	return Config{
		HTTPAddr:         ":8080",
		FlightHoldTTL:    10 * time.Minute,
		CarHoldTTL:       15 * time.Minute,
		HoldExtension:    5 * time.Minute,
		WaitlistOfferTTL: 10 * time.Minute,
		SweepInterval:    30 * time.Second,
		PickupEarly:      2 * time.Hour,
		HoldLimit:        Rate{N: 3, Window: 15 * time.Minute},
		RequestLimit:     Rate{N: 100, Window: time.Second},
		AddressLimit:     Rate{N: 1000, Window: time.Second},
		ShedWait:         150 * time.Millisecond,
		ReadMaxLag:       5 * time.Second,
		DBMaxConns:       20,
		DBMinConns:       10,
		LogLevel:         "info",
		Protect:          true,
		FareBuckets:      1,
		HoldBatch:        64,
		Events:           defaultEvents(),
	}
}

// Load returns the settings from getenv and args (flags of `berth serve`).
func Load(args []string, getenv func(string) string) (Config, error) {
	return LoadFlags(flag.NewFlagSet("serve", flag.ContinueOnError), args, getenv)
}

// LoadFlags is Load parsing args with fs, the flag set of the command
// that takes serve's settings (its name and -h text are the caller's).
func LoadFlags(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	c := Defaults()
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

func (c *Config) fromEnv(getenv func(string) string) error {
	str := func(name string, dst *string) {
		if v := getenv(name); v != "" {
			*dst = v
		}
	}
	str("BERTH_HTTP_ADDR", &c.HTTPAddr)
	str("BERTH_DATABASE_URL", &c.DatabaseURL)
	str("BERTH_DATABASE_READ_URL", &c.DatabaseReadURL)
	str("BERTH_REDIS_URL", &c.RedisURL)
	str("BERTH_AUTH_SECRET", &c.AuthSecret)
	str("BERTH_WEBHOOK_SECRET", &c.WebhookSecret)
	str("BERTH_GATEWAY_URL", &c.GatewayURL)
	str("BERTH_PUBLIC_URL", &c.PublicURL)
	str("BERTH_LOG_LEVEL", &c.LogLevel)
	if v := getenv("BERTH_KAFKA_BROKERS"); v != "" {
		c.KafkaBrokers = splitList(v)
	}
	durations := map[string]*time.Duration{
		"BERTH_FLIGHT_HOLD_TTL":    &c.FlightHoldTTL,
		"BERTH_CAR_HOLD_TTL":       &c.CarHoldTTL,
		"BERTH_SWEEP_INTERVAL":     &c.SweepInterval,
		"BERTH_HOLD_EXTENSION":     &c.HoldExtension,
		"BERTH_WAITLIST_OFFER_TTL": &c.WaitlistOfferTTL,
		"BERTH_SHED_WAIT":          &c.ShedWait,
		"BERTH_AUDIT_INTERVAL":     &c.AuditInterval,
		"BERTH_READ_MAX_LAG":       &c.ReadMaxLag,
		"BERTH_PICKUP_EARLY":       &c.PickupEarly,
	}
	if err := envVars(getenv, durations, time.ParseDuration, "a duration like 10m"); err != nil {
		return err
	}
	if v := getenv("BERTH_HOLD_LIMIT"); v != "" {
		if err := c.HoldLimit.Set(v); err != nil {
			return fmt.Errorf("BERTH_HOLD_LIMIT: %w", err)
		}
	}
	if v := getenv("BERTH_REQUEST_LIMIT"); v != "" {
		if err := c.RequestLimit.Set(v); err != nil {
			return fmt.Errorf("BERTH_REQUEST_LIMIT: %w", err)
		}
	}
	if v := getenv("BERTH_ADDRESS_LIMIT"); v != "" {
		if err := c.AddressLimit.Set(v); err != nil {
			return fmt.Errorf("BERTH_ADDRESS_LIMIT: %w", err)
		}
	}
	for name, dst := range map[string]*bool{"BERTH_PROTECT": &c.Protect, "BERTH_PAYSIM": &c.PaySim} {
		if v := getenv(name); v != "" {
			on, err := parseSwitch(v)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			*dst = on
		}
	}
	ints := map[string]*int{
		"BERTH_DB_MAX_CONNS": &c.DBMaxConns,
		"BERTH_DB_MIN_CONNS": &c.DBMinConns,
		"BERTH_FARE_BUCKETS": &c.FareBuckets,
		"BERTH_HOLD_BATCH":   &c.HoldBatch,
	}
	if err := envVars(getenv, ints, strconv.Atoi, "a number"); err != nil {
		return err
	}
	return c.Events.fromEnv(getenv)
}

// parseSwitch reads on/off (true/false, 1/0).
func parseSwitch(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "on", "true", "1":
		return true, nil
	case "off", "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("%q is not on or off", v)
}

// envVars sets *dst from each variable of vars that getenv gives, with
// parse; a value parse refuses is named as not being want.
func envVars[T any](getenv func(string) string, vars map[string]*T, parse func(string) (T, error), want string) error {
	for name, dst := range vars {
		if v := getenv(name); v != "" {
			x, err := parse(v)
			if err != nil {
				return fmt.Errorf("%s: %q is not %s", name, v, want)
			}
			*dst = x
		}
	}
	return nil
}

// Flags registers the settings as flags on fs, with the current values as
// defaults, so flags override the environment.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "listen address (BERTH_HTTP_ADDR)")
	URLVar(fs, &c.DatabaseURL, "database-url", "PostgreSQL URL (BERTH_DATABASE_URL)")
	URLVar(fs, &c.DatabaseReadURL, "database-read-url", "read-only PostgreSQL URL for searches (BERTH_DATABASE_READ_URL)")
	URLVar(fs, &c.RedisURL, "redis-url", "Redis URL (BERTH_REDIS_URL)")
	fs.Func("kafka-brokers", "comma-separated Kafka brokers (BERTH_KAFKA_BROKERS)", func(s string) error {
		c.KafkaBrokers = splitList(s)
		return nil
	})
	URLVar(fs, &c.GatewayURL, "gateway-url", "payment gateway base URL (BERTH_GATEWAY_URL)")
	fs.BoolVar(&c.PaySim, "paysim", c.PaySim, "run the built-in payment simulator instead of a gateway; loopback listen addresses only (BERTH_PAYSIM)")
	fs.DurationVar(&c.PickupEarly, "pickup-early", c.PickupEarly, "how long before a rental's start the host may hand the car over (BERTH_PICKUP_EARLY)")
	fs.StringVar(&c.PublicURL, "public-url", c.PublicURL, "base URL where the payment gateway reaches berth (BERTH_PUBLIC_URL)")
	fs.DurationVar(&c.FlightHoldTTL, "flight-hold-ttl", c.FlightHoldTTL, "flight hold lifetime (BERTH_FLIGHT_HOLD_TTL)")
	fs.DurationVar(&c.CarHoldTTL, "car-hold-ttl", c.CarHoldTTL, "car hold lifetime (BERTH_CAR_HOLD_TTL)")
	fs.DurationVar(&c.HoldExtension, "hold-extension", c.HoldExtension, "how much one extension adds to a hold (BERTH_HOLD_EXTENSION)")
	fs.DurationVar(&c.WaitlistOfferTTL, "waitlist-offer-ttl", c.WaitlistOfferTTL, "how long a waitlist offer is held (BERTH_WAITLIST_OFFER_TTL)")
	fs.DurationVar(&c.SweepInterval, "sweep-interval", c.SweepInterval, "hold-expiry sweeper period (BERTH_SWEEP_INTERVAL)")
	fs.Var(&c.HoldLimit, "hold-limit", "holds per customer per window, or off (BERTH_HOLD_LIMIT)")
	fs.Var(&c.RequestLimit, "request-limit", "requests per client per window on every route, or off (BERTH_REQUEST_LIMIT)")
	fs.Var(&c.AddressLimit, "address-limit", "requests per client address per window, counted before authentication, or off (BERTH_ADDRESS_LIMIT)")
	fs.DurationVar(&c.ShedWait, "shed-wait", c.ShedWait, "longest wait for a database connection before 503 overloaded (BERTH_SHED_WAIT)")
	fs.DurationVar(&c.ReadMaxLag, "read-max-lag", c.ReadMaxLag, "how far the read replica may lag before reads go to the primary (BERTH_READ_MAX_LAG)")
	fs.DurationVar(&c.AuditInterval, "audit-interval", c.AuditInterval, "how often the invariants are audited and exported as berth_audit_violations, 0 for never (BERTH_AUDIT_INTERVAL)")
	fs.IntVar(&c.DBMaxConns, "db-max-conns", c.DBMaxConns, "database pool size (BERTH_DB_MAX_CONNS)")
	fs.IntVar(&c.DBMinConns, "db-min-conns", c.DBMinConns, "connections kept open when idle, at most the pool size (BERTH_DB_MIN_CONNS)")
	fs.IntVar(&c.FareBuckets, "fare-buckets", c.FareBuckets, "counter rows per new fare class (BERTH_FARE_BUCKETS)")
	fs.IntVar(&c.HoldBatch, "hold-batch", c.HoldBatch, "most holds coalesced into one transaction (BERTH_HOLD_BATCH)")
	fs.BoolVar(&c.Migrate, "migrate", c.Migrate, "apply migrations before serving")
	fs.BoolVar(&c.Protect, "protect", c.Protect, "surge layers in front of the database (BERTH_PROTECT)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error (BERTH_LOG_LEVEL)")
	c.Events.flags(fs)
}

// Validate names the first setting that cannot work.
func (c *Config) Validate() error {
	var errs []error
	bad := func(name, format string, args ...any) { errs = append(errs, fmt.Errorf(name+": "+format, args...)) }
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		bad("BERTH_HTTP_ADDR", "%q is not host:port", c.HTTPAddr)
	}
	if c.DatabaseURL == "" {
		bad("BERTH_DATABASE_URL", "is required (a postgres:// URL)")
	} else if !isURL(c.DatabaseURL, "postgres", "postgresql") {
		bad("BERTH_DATABASE_URL", "must be a postgres:// URL")
	}
	if c.DatabaseReadURL != "" && !isURL(c.DatabaseReadURL, "postgres", "postgresql") {
		bad("BERTH_DATABASE_READ_URL", "must be a postgres:// URL")
	}
	if c.RedisURL != "" && !isURL(c.RedisURL, "redis", "rediss") {
		bad("BERTH_REDIS_URL", "must be a redis:// URL")
	}
	if c.GatewayURL != "" && !isURL(c.GatewayURL, "http", "https") {
		bad("BERTH_GATEWAY_URL", "must be an http(s):// URL")
	}
	switch {
	case c.GatewayURL == "" && !c.PaySim:
		bad("BERTH_GATEWAY_URL", "is required: set it to your payment gateway's URL, "+
			"or set BERTH_PAYSIM=on (with a loopback BERTH_HTTP_ADDR such as 127.0.0.1:8080) for the built-in simulator, which takes no real money")
	case c.GatewayURL != "" && c.PaySim:
		bad("BERTH_PAYSIM", "is on while BERTH_GATEWAY_URL is set: choose one")
	case c.PaySim && !IsLoopback(c.HTTPAddr):
		bad("BERTH_PAYSIM", "is on, but BERTH_HTTP_ADDR %q is not a loopback address: anyone who reaches the simulator "+
			"can pay for any booking; listen on 127.0.0.1 or set BERTH_GATEWAY_URL", c.HTTPAddr)
	}
	if c.PickupEarly < 0 || c.PickupEarly > 7*24*time.Hour {
		bad("BERTH_PICKUP_EARLY", "%s must be between 0 and 168h", c.PickupEarly)
	}
	if c.PublicURL != "" && !isURL(c.PublicURL, "http", "https") {
		bad("BERTH_PUBLIC_URL", "must be an http(s):// URL")
	}
	if c.GatewayURL != "" && c.PublicURL == "" && !IsLoopback(c.HTTPAddr) {
		// Without it each process gives the gateway its own address, so a
		// charge's webhooks reach only the process that started it: while
		// that one restarts, paid customers lose their seats.
		bad("BERTH_PUBLIC_URL", "is required with BERTH_GATEWAY_URL when BERTH_HTTP_ADDR (%q) is not a loopback address: "+
			"the URL where the gateway reaches every berth process (the load balancer), for its webhooks", c.HTTPAddr)
	}
	if len(c.AuthSecret) < 16 {
		bad("BERTH_AUTH_SECRET", "is required, at least 16 characters")
	}
	if _, err := WebhookKey(c.WebhookSecret); err != nil {
		bad("BERTH_WEBHOOK_SECRET", "%v", err)
	}
	for name, d := range map[string]time.Duration{
		"BERTH_FLIGHT_HOLD_TTL": c.FlightHoldTTL, "BERTH_CAR_HOLD_TTL": c.CarHoldTTL, "BERTH_SWEEP_INTERVAL": c.SweepInterval,
		"BERTH_HOLD_EXTENSION": c.HoldExtension, "BERTH_WAITLIST_OFFER_TTL": c.WaitlistOfferTTL,
	} {
		if d < time.Second || d > 24*time.Hour {
			bad(name, "%s must be between 1s and 24h", d)
		}
	}
	if c.ReadMaxLag < 100*time.Millisecond {
		bad("BERTH_READ_MAX_LAG", "%s must be at least 100ms", c.ReadMaxLag)
	}
	if c.AuditInterval != 0 && c.AuditInterval < time.Minute {
		bad("BERTH_AUDIT_INTERVAL", "%s must be 0 (off) or at least 1m: an audit reads every live booking", c.AuditInterval)
	}
	if c.ShedWait < time.Millisecond || c.ShedWait > 10*time.Second {
		bad("BERTH_SHED_WAIT", "%s must be between 1ms and 10s", c.ShedWait)
	}
	if c.DBMaxConns < 2 || c.DBMaxConns > 1000 {
		bad("BERTH_DB_MAX_CONNS", "%d must be between 2 and 1000", c.DBMaxConns)
	}
	if c.DBMinConns < 0 || c.DBMinConns > 1000 {
		bad("BERTH_DB_MIN_CONNS", "%d must be between 0 and 1000", c.DBMinConns)
	}
	if c.FareBuckets < 1 || c.FareBuckets > 64 {
		bad("BERTH_FARE_BUCKETS", "%d must be between 1 and 64", c.FareBuckets)
	}
	if c.HoldBatch < 1 || c.HoldBatch > 1000 {
		bad("BERTH_HOLD_BATCH", "%d must be between 1 and 1000", c.HoldBatch)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("BERTH_LOG_LEVEL", "%q is not debug, info, warn or error", c.LogLevel)
	}
	errs = append(errs, c.Events.validate()...)
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
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
