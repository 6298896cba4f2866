package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// settings is the one list of berth serve's settings: Defaults, Load (the
// environment and the flags), Validate, the -h text and the README's
// table of settings are all made from it. Its entries point at c's fields.
// A new setting is a field of Config and one entry here (then
// BERTH_UPDATE_README=1 go test ./internal/config/ rewrites the tables
// of settings in the README and docs/api.md).
func (c *Config) settings() []setting {
	e := &c.Events
	return []setting{
		{env: "BERTH_HTTP_ADDR", flag: "http-addr", def: ":8080", help: "listen address",
			v: text(&c.HTTPAddr, hostPort)},
		{env: "BERTH_DATABASE_URL", flag: "database-url", shown: "required", secret: urlPassword,
			help: "PostgreSQL ≥ 15, with the `btree_gist` extension",
			v:    text(&c.DatabaseURL, requiredURL("a postgres:// URL", "postgres", "postgresql"))},
		{env: "BERTH_DATABASE_READ_URL", flag: "database-read-url", secret: urlPassword,
			help: "read-only database (a replica) for searches and seat maps while it is current (`BERTH_READ_MAX_LAG`); " +
				"`/readyz` reports it `degraded` (still 200) while reads fall back to the primary",
			v: text(&c.DatabaseReadURL, optionalURL("a postgres:// URL", "postgres", "postgresql"))},
		{env: "BERTH_DB_MAX_CONNS", flag: "db-max-conns", def: "20", help: "database pool size per process (2–1000)",
			v: number(&c.DBMaxConns, between(2, 1000))},
		{env: "BERTH_DB_MIN_CONNS", flag: "db-min-conns", def: "10",
			help: "connections kept open when idle, at most the pool size (0–1000): a sale's first second does not wait for new backends",
			v:    number(&c.DBMinConns, between(0, 1000))},
		{env: "BERTH_REDIS_URL", flag: "redis-url", secret: urlPassword,
			help: "Redis; without it an embedded single-instance substitute is used and a warning is logged",
			v:    text(&c.RedisURL, optionalURL("a redis:// or rediss:// URL", "redis", "rediss"))},
		{env: "BERTH_KAFKA_BROKERS", flag: "kafka-brokers",
			help: "comma-separated Kafka brokers; without them events go to in-process consumers straight from the outbox",
			v:    list(&c.KafkaBrokers, broker)},
		{env: "BERTH_KAFKA_TOPIC", flag: "kafka-topic", def: "booking-events", help: "topic of the booking events",
			v: text(&e.KafkaTopic, notEmpty)},
		{env: "BERTH_EVENTS_IN_SERVE", flag: "events-in-serve", def: "true",
			help: "run the outbox relay and the consumers inside `serve`; `false` when `berth worker` processes run them",
			v:    trueFalse(&e.InServe)},
		{env: "BERTH_REFUND_EVENT_DATA", flag: "refund-event-data", def: "booking",
			help: "`data` of `refund.*` events: `booking` (the booking, the refund in `data.refund`) or `refund` (the refund alone, as releases before 2026-12-07 wrote it: only while rolling out from one, docs/events.md)",
			v:    text(&e.RefundData, oneOf("booking", "refund"))},
		{env: "BERTH_EVENT_RETENTION", flag: "event-retention", def: "168h",
			help: "how long published events and processed-event records are kept (≥ 1h)",
			v:    duration(&e.Retention, "168h", atLeast("1h"))},
		{env: "BERTH_OUTBOX_POLL_INTERVAL", flag: "outbox-poll-interval", def: "1s",
			help: "outbox relay polling period besides LISTEN/NOTIFY (10ms–1m)",
			v:    duration(&e.PollInterval, "168h", within("10ms", "1m"))},
		{env: "BERTH_NOTIFY_WEBHOOK_URL", flag: "notify-webhook-url",
			help: "where customer notifications are posted (signed); unset, they are logged",
			v:    text(&e.NotifyURL, optionalURL("an http(s):// URL", "http", "https"))},
		{env: "BERTH_CHECKIN_URL", flag: "checkin-url",
			help: "where the check-in sync is posted (signed); unset, it is logged",
			v:    text(&e.CheckinURL, optionalURL("an http(s):// URL", "http", "https"))},
		{env: "BERTH_HOOK_SECRET", secret: hidden,
			help: "`whsec_<base64>` key signing those two webhooks; required when either is set",
			v:    text(&e.HookSecret), check: func() error {
				if e.NotifyURL == "" && e.CheckinURL == "" {
					return nil
				}
				if _, err := WebhookKey(e.HookSecret); err != nil {
					return fmt.Errorf("%w (it signs the notification and check-in webhooks)", err)
				}
				return nil
			}},
		{env: "BERTH_AUTH_SECRET", cmdFlag: "secret", shown: "required", secret: hidden,
			help: "HS256 key for bearer tokens (≥ 16 characters, random: a placeholder is refused)",
			v:    text(&c.AuthSecret, minLength(16), notPlaceholder)},
		{env: "BERTH_WEBHOOK_SECRET", cmdFlag: "webhook-secret", shown: "required", secret: hidden,
			help: "HMAC key for payment-gateway webhooks, `whsec_<base64>` of ≥ 16 bytes",
			v:    text(&c.WebhookSecret, webhookKey)},
		{env: "BERTH_GATEWAY_URL", flag: "gateway-url", secret: urlPassword,
			help: "payment gateway base URL; required unless `BERTH_PAYSIM=on`",
			v:    text(&c.GatewayURL, optionalURL("an http(s):// URL", "http", "https")), check: func() error {
				if c.GatewayURL == "" && !c.PaySim {
					return errors.New("is required: set it to your payment gateway's URL, " +
						"or set BERTH_PAYSIM=on (with a loopback BERTH_HTTP_ADDR such as 127.0.0.1:8080) for the built-in simulator, which takes no real money")
				}
				return nil
			}},
		{env: "BERTH_PAYSIM", flag: "paysim", def: "off",
			help: "`on`: the built-in simulator takes (pretend) payments in process, checkout pages under `/paysim/`; " +
				"refused on a listen address that is not loopback, and together with `BERTH_GATEWAY_URL` (`make run` turns it on)",
			v: onOff(&c.PaySim), check: func() error {
				switch {
				case c.PaySim && c.GatewayURL != "":
					return errors.New("is on while BERTH_GATEWAY_URL is set: choose one")
				case c.PaySim && !IsLoopback(c.HTTPAddr):
					return fmt.Errorf("is on, but BERTH_HTTP_ADDR %q is not a loopback address: anyone who reaches the simulator "+
						"can pay for any booking; listen on 127.0.0.1 or set BERTH_GATEWAY_URL", c.HTTPAddr)
				}
				return nil
			}},
		{env: "BERTH_PICKUP_EARLY", flag: "pickup-early", def: "2h",
			help: "how long before a rental's start the host may hand the car over (0–168h)",
			v:    duration(&c.PickupEarly, "10m", within("0", "168h"))},
		{env: "BERTH_PUBLIC_URL", flag: "public-url", shown: "the listen address",
			help: "base URL where the gateway reaches berth, the load balancer in front of every process: webhooks go to it + `/payments/webhook`, " +
				"simulator pages are under it + `/paysim`; required for `worker` processes, and with `BERTH_GATEWAY_URL` when `BERTH_HTTP_ADDR` " +
				"is not loopback (berth refuses to start: several processes must give the gateway one shared URL)",
			v: text(&c.PublicURL, optionalURL("an http(s):// URL", "http", "https")), check: func() error {
				if c.Worker && c.PublicURL == "" {
					// A worker has no listen address the gateway could reach:
					// the refunds consumer tells the gateway where to send its
					// webhooks.
					return errors.New("is required for berth worker: the URL where the gateway reaches the berth serve processes " +
						"(the load balancer), for the webhooks of the refunds the worker starts")
				}
				if c.GatewayURL != "" && c.PublicURL == "" && !IsLoopback(c.HTTPAddr) {
					// Without it each process gives the gateway its own address, so a
					// charge's webhooks reach only the process that started it: while
					// that one restarts, paid customers lose their seats.
					return fmt.Errorf("is required with BERTH_GATEWAY_URL when BERTH_HTTP_ADDR (%q) is not a loopback address: "+
						"the URL where the gateway reaches every berth process (the load balancer), for its webhooks", c.HTTPAddr)
				}
				return nil
			}},
		{env: "BERTH_FLIGHT_HOLD_TTL", flag: "flight-hold-ttl", def: "10m", help: "how long a flight hold lasts (1s–24h)",
			v: duration(&c.FlightHoldTTL, "10m", within("1s", "24h"))},
		{env: "BERTH_CAR_HOLD_TTL", flag: "car-hold-ttl", def: "15m", help: "how long a car hold lasts (1s–24h)",
			v: duration(&c.CarHoldTTL, "10m", within("1s", "24h"))},
		{env: "BERTH_HOLD_EXTENSION", flag: "hold-extension", def: "5m", help: "how much later one extension moves a hold's deadline (1s–24h)",
			v: duration(&c.HoldExtension, "10m", within("1s", "24h"))},
		{env: "BERTH_WAITLIST_OFFER_TTL", flag: "waitlist-offer-ttl", def: "10m", help: "how long a waitlist offer's hold lasts (1s–24h)",
			v: duration(&c.WaitlistOfferTTL, "10m", within("1s", "24h"))},
		{env: "BERTH_SWEEP_INTERVAL", flag: "sweep-interval", def: "30s", help: "longest wait between hold-expiry sweeps; a sweep also starts when the earliest hold falls due (1s–24h)",
			v: duration(&c.SweepInterval, "10m", within("1s", "24h"))},
		{env: "BERTH_HOLD_LIMIT", flag: "hold-limit", def: "3/15m", help: "successful holds per customer per window, or `off` for none",
			v: rate(&c.HoldLimit)},
		{env: "BERTH_PROTECT", flag: "protect", def: "on",
			help: "the surge layers in front of the database (waiting room, seat gate, limits, shedding); `off` runs the bare design (for comparison)",
			v:    onOff(&c.Protect)},
		{env: "BERTH_REQUEST_LIMIT", flag: "request-limit", def: "100/1s", help: "requests per client (token subject, else address) per window on every route, or `off` for none",
			v: rate(&c.RequestLimit)},
		{env: "BERTH_ADDRESS_LIMIT", flag: "address-limit", def: "1000/1s",
			help: "requests per client address (an IPv6 client: its /64) per window on every route but the probes and the webhook, paths no route serves included, counted before authentication, or `off` for none",
			v:    rate(&c.AddressLimit)},
		{env: "BERTH_TRUSTED_PROXIES", flag: "trusted-proxies",
			help: "comma-separated addresses or CIDR ranges of the proxies in front of berth: from these, the client's address is taken from `X-Forwarded-For` for the address and request limits",
			v:    prefixes(&c.TrustedProxies)},
		{env: "BERTH_SHED_WAIT", flag: "shed-wait", def: "150ms",
			help: "longest wait for a database connection or a route's concurrency slot before 503 `overloaded` (1ms–10s)",
			v:    duration(&c.ShedWait, "10m", within("1ms", "10s"))},
		{env: "BERTH_READ_MAX_LAG", flag: "read-max-lag", def: "5s",
			help: "with `BERTH_DATABASE_READ_URL`: searches and seat maps read from the replica while its lag, measured against the primary's " +
				"WAL position every second, is below this (≥ 100ms); else, and while it is down, from the primary, and `/readyz` reports " +
				"`databaseRead: degraded` with status 200. Holds, payments and cancellations always use the primary",
			v: duration(&c.ReadMaxLag, "10m", atLeast("100ms"))},
		{env: "BERTH_AUDIT_INTERVAL", flag: "audit-interval", def: "0", shown: "`0` (off)",
			help: "how often serve and worker audit the invariants, record the run (the admin page's last audit) and export " +
				"`berth_audit_violations{invariant}`; processes sharing a database audit once per interval between them (0, or ≥ 1m; the deploy files set 10m)",
			v: duration(&c.AuditInterval, "10m", offOrAtLeastAMinute)},
		{env: "BERTH_FARE_BUCKETS", flag: "fare-buckets", def: "1", help: "counter rows per new fare class unless `POST /admin/flights` says otherwise (1–64)",
			v: number(&c.FareBuckets, between(1, 64))},
		{env: "BERTH_HOLD_BATCH", flag: "hold-batch", def: "64", help: "most holds of one flight coalesced into one transaction, with the surge layers on (1–1000)",
			v: number(&c.HoldBatch, between(1, 1000))},
		{env: "BERTH_HOLD_FLUSHES", flag: "hold-flushes", def: "4",
			help: "batches of one flight's holds a process may have in the database at once, with the surge layers on (1–64): " +
				"more overlap one batch's writes with another's commit, fewer make larger batches that cost the database less per hold",
			v: number(&c.HoldFlushes, between(1, 64))},
		{env: "BERTH_HOLD_CONNS", flag: "hold-conns", def: "4",
			help: "database connections holds may use at once per process, with the surge layers on, at most three quarters of the pool (1–1000): " +
				"about the database's cores divided by berth's processes; the rest wait their turn, or get 503 `overloaded` after `BERTH_SHED_WAIT`",
			v: number(&c.HoldConns, between(1, 1000))},
		{env: "BERTH_LOG_LEVEL", flag: "log-level", def: "info", help: "`debug`, `info`, `warn` or `error` (JSON lines on stderr)",
			v: text(&c.LogLevel, oneOf("debug", "info", "warn", "error"))},
		{flag: "migrate", def: "false", help: "apply the embedded migrations before serving (`berth migrate` applies them and exits)",
			v: trueFalse(&c.Migrate)},
	}
}

// A setting is one entry of the list of settings.
type setting struct {
	env  string // the environment variable; "" for a flag only
	flag string // the flag of serve and worker; "" for a variable only (the secrets, kept off command lines)
	// cmdFlag is the flag of a secret in the one-off commands that take
	// it through LoadSome (berth token --secret, berth paysim
	// --webhook-secret), which are not long-running processes.
	cmdFlag string
	// def is the default, written as in the environment; "" leaves the
	// zero value. shown replaces it in the README when the default is not
	// a value of its own ("required", "the listen address").
	def, shown string
	// help says what the setting does, in markdown: the README shows it
	// as it is, -h without the backquotes.
	help   string
	secret secrecy
	v      value // the field: how it is parsed and printed, and its own rules
	// check is a rule that involves other settings (nil: none); it
	// returns what is wrong without the setting's name.
	check func() error
}

// secrecy is how a setting's value may be shown in -h.
type secrecy int

const (
	public      secrecy = iota
	urlPassword         // a URL that may carry a password: masked
	hidden              // never: "(set)"
)

// name is how messages name s: its variable, else its flag.
func (s setting) name() string {
	if s.env != "" {
		return s.env
	}
	return "-" + s.flag
}

// usage is s's -h text.
func (s setting) usage() string {
	u := strings.ReplaceAll(s.help, "`", "")
	if s.env != "" {
		u += " (" + s.env + ")"
	}
	return u
}

// register adds s's flag to fs, with the current value as the default.
func (s setting) register(fs *flag.FlagSet) {
	if s.flag == "" {
		return
	}
	if s.secret == public {
		s.v.register(fs, s.flag, s.usage())
		return
	}
	t, ok := s.v.(typed[string])
	if !ok {
		panic("config: " + s.name() + " is secret but not a string")
	}
	if s.secret == hidden {
		SecretVar(fs, t.p, s.flag, s.usage())
	} else {
		URLVar(fs, t.p, s.flag, s.usage())
	}
}

// validate returns what is wrong with s, naming it.
func (s setting) validate() []error {
	var errs []error
	if err := s.v.valid(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", s.name(), err))
	}
	if s.check != nil {
		if err := s.check(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name(), err))
		}
	}
	return errs
}

// A value is a Config field seen by its setting.
type value interface {
	// set parses s (from the environment or the default) into the field;
	// its error says what s is not, without the setting's name.
	set(s string) error
	register(fs *flag.FlagSet, name, usage string)
	valid() error // the field's own rules
}

// typed is a value of a field of type T.
type typed[T any] struct {
	p     *T
	parse func(string) (T, error)
	want  string // what parse accepts: "a number"
	flag  func(fs *flag.FlagSet, p *T, name, usage string)
	rules []func(T) error
}

func (t typed[T]) set(s string) error {
	v, err := t.parse(s)
	if err != nil {
		return fmt.Errorf("%q is not %s", s, t.want)
	}
	*t.p = v
	return nil
}

func (t typed[T]) register(fs *flag.FlagSet, name, usage string) { t.flag(fs, t.p, name, usage) }

func (t typed[T]) valid() error {
	for _, rule := range t.rules {
		if err := rule(*t.p); err != nil {
			return err
		}
	}
	return nil
}

func text(p *string, rules ...func(string) error) value {
	return typed[string]{p: p, parse: func(s string) (string, error) { return s, nil }, rules: rules,
		flag: func(fs *flag.FlagSet, p *string, name, usage string) { fs.StringVar(p, name, *p, usage) }}
}

// duration is a time.Duration field; like is the example its parse
// error gives.
func duration(p *time.Duration, like string, rules ...func(time.Duration) error) value {
	return typed[time.Duration]{p: p, parse: time.ParseDuration, want: "a duration like " + like, rules: rules,
		flag: func(fs *flag.FlagSet, p *time.Duration, name, usage string) { fs.DurationVar(p, name, *p, usage) }}
}

func number(p *int, rules ...func(int) error) value {
	return typed[int]{p: p, parse: strconv.Atoi, want: "a number", rules: rules,
		flag: func(fs *flag.FlagSet, p *int, name, usage string) { fs.IntVar(p, name, *p, usage) }}
}

// onOff is a switch written on/off (true/false, 1/0) in the environment.
func onOff(p *bool) value {
	return typed[bool]{p: p, parse: parseSwitch, want: "on or off",
		flag: func(fs *flag.FlagSet, p *bool, name, usage string) { fs.Var((*onOffFlag)(p), name, usage) }}
}

// onOffFlag is an on/off switch's flag: -protect alone is on, and
// -protect=off, =on (or true, false, 1, 0) set it as the environment does;
// -h shows its default as on or off.
type onOffFlag bool

func (f *onOffFlag) String() string {
	if f != nil && *f {
		return "on"
	}
	return "off"
}

func (f *onOffFlag) Set(s string) error {
	v, err := parseSwitch(s)
	*f = onOffFlag(v)
	return err
}

func (f *onOffFlag) IsBoolFlag() bool { return true }

// trueFalse is a switch written as strconv.ParseBool reads it.
func trueFalse(p *bool) value {
	return typed[bool]{p: p, parse: strconv.ParseBool, want: "true or false",
		flag: func(fs *flag.FlagSet, p *bool, name, usage string) { fs.BoolVar(p, name, *p, usage) }}
}

func rate(p *Rate) value {
	return typed[Rate]{p: p, parse: func(s string) (r Rate, err error) { return r, r.Set(s) }, want: "a rate like 3/15m",
		flag: func(fs *flag.FlagSet, p *Rate, name, usage string) { fs.Var(p, name, usage) }}
}

// prefixes is a comma-separated list of addresses or CIDR ranges
// (ParsePrefix), read once here.
func prefixes(p *[]netip.Prefix) value {
	parse := func(s string) ([]netip.Prefix, error) {
		var out []netip.Prefix
		for _, x := range splitList(s) {
			px, err := ParsePrefix(x)
			if err != nil {
				return nil, err
			}
			out = append(out, px)
		}
		return out, nil
	}
	return typed[[]netip.Prefix]{p: p, parse: parse, want: "a list of addresses or CIDR ranges",
		flag: func(fs *flag.FlagSet, p *[]netip.Prefix, name, usage string) {
			fs.Func(name, usage, func(s string) error {
				v, err := parse(s)
				if err != nil {
					return fmt.Errorf("%q is not a list of addresses or CIDR ranges", s)
				}
				*p = v
				return nil
			})
		}}
}

// list is a comma-separated list field; each of its entries must pass
// rules, and an empty entry (",", "a,,b") is refused rather than dropped.
func list(p *[]string, rules ...func(string) error) value {
	each := func(l []string) error {
		for _, x := range l {
			if x == "" {
				return errors.New("has an empty entry")
			}
			for _, rule := range rules {
				if err := rule(x); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return typed[[]string]{p: p, parse: func(s string) ([]string, error) { return splitList(s), nil }, rules: []func([]string) error{each},
		flag: func(fs *flag.FlagSet, p *[]string, name, usage string) {
			fs.Func(name, usage, func(s string) error { *p = splitList(s); return nil })
		}}
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

// The rules of single values; their errors leave out the setting's name.

// broker accepts a Kafka broker's host:port, with a port of 1–65535.
func broker(s string) error {
	host, port, err := net.SplitHostPort(s)
	n, perr := strconv.Atoi(port)
	if err != nil || host == "" || strings.ContainsAny(host, " \t") || perr != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q is not host:port with a port of 1–65535", s)
	}
	return nil
}

func hostPort(s string) error {
	if _, _, err := net.SplitHostPort(s); err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	return nil
}

func requiredURL(what string, schemes ...string) func(string) error {
	return func(s string) error {
		if s == "" {
			return fmt.Errorf("is required (%s)", what)
		}
		return optionalURL(what, schemes...)(s)
	}
}

func optionalURL(what string, schemes ...string) func(string) error {
	return func(s string) error {
		if s != "" && !isURL(s, schemes...) {
			return fmt.Errorf("must be %s", what)
		}
		return nil
	}
}

func notEmpty(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	return nil
}

func minLength(n int) func(string) error {
	return func(s string) error {
		if len(s) < n {
			return fmt.Errorf("is required, at least %d characters", n)
		}
		return nil
	}
}

// notPlaceholder refuses a secret left as an example gave it ("CHANGE-ME…")
// or typed by hand from a few characters ("aaaaaaaaaaaaaaaa", spaces): a
// random key of 16 characters or more has many more than 8 different ones.
func notPlaceholder(s string) error {
	folded := strings.NewReplacer("-", "", "_", "", " ", "").Replace(strings.ToLower(s))
	if strings.Contains(folded, "changeme") {
		return errors.New("is a placeholder (CHANGE-ME): generate a random one, e.g. with openssl rand -base64 32")
	}
	distinct := map[rune]bool{}
	for _, r := range s {
		distinct[r] = true
	}
	if len(distinct) < 8 {
		return errors.New("has fewer than 8 different characters: generate a random one, e.g. with openssl rand -base64 32")
	}
	return nil
}

func webhookKey(s string) error {
	_, err := WebhookKey(s)
	return err
}

// oneOf accepts exactly the values given.
func oneOf(values ...string) func(string) error {
	return func(s string) error {
		if !slices.Contains(values, s) {
			return fmt.Errorf("%q is not one of %s", s, strings.Join(values, ", "))
		}
		return nil
	}
}

func between(lo, hi int) func(int) error {
	return func(n int) error {
		if n < lo || n > hi {
			return fmt.Errorf("%d must be between %d and %d", n, lo, hi)
		}
		return nil
	}
}

// within and atLeast take their bounds as they are written in messages.
func within(lo, hi string) func(time.Duration) error {
	min, max := mustDuration(lo), mustDuration(hi)
	return func(d time.Duration) error {
		if d < min || d > max {
			return fmt.Errorf("%s must be between %s and %s", d, lo, hi)
		}
		return nil
	}
}

func atLeast(lo string) func(time.Duration) error {
	min := mustDuration(lo)
	return func(d time.Duration) error {
		if d < min {
			return fmt.Errorf("%s must be at least %s", d, lo)
		}
		return nil
	}
}

func offOrAtLeastAMinute(d time.Duration) error {
	if d != 0 && d < time.Minute {
		return fmt.Errorf("%s must be 0 (off) or at least 1m: an audit reads every live booking", d)
	}
	return nil
}

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

// markdownTable is the table of settings in the README and docs/api.md.
func markdownTable() string {
	var b strings.Builder
	b.WriteString("| variable | flag | default | meaning |\n|---|---|---|---|\n")
	var c Config
	for _, s := range c.settings() {
		env, fl, def := "—", "—", "none"
		if s.env != "" {
			env = "`" + s.env + "`"
		}
		if s.flag != "" {
			fl = "`--" + s.flag + "`"
		}
		switch {
		case s.shown != "":
			def = s.shown
		case s.def != "":
			def = "`" + s.def + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", env, fl, def, s.help)
	}
	return b.String()
}
