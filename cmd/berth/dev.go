package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/devenv"
	"berth.dev/berth/internal/rental"
	"berth.dev/berth/internal/seed"
)

// dev runs a whole local stack with one command: a private PostgreSQL
// (unless BERTH_DATABASE_URL is set), migrations, a small demo schedule,
// and serve, printing the URL and ready-to-use tokens.
func dev(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("dev")
	dir := fs.String("dir", ".berth", "project-local folder for the private database and secrets")
	pgPort := fs.Int("pg-port", 0, "port of the private PostgreSQL (loopback only; default: one derived from --dir, so that each checkout has its own)")
	addr := fs.String("http-addr", "127.0.0.1:8080", "listen address")
	days := fs.Int("days", 3, "days of demo schedule")
	flights := fs.Int("flights", 300, "demo flights per day")
	cars := fs.Int("cars", 500, "demo cars (with a history of bookings)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	secrets, err := devenv.LoadSecrets(filepath.Join(*dir, "secrets.json"))
	if err != nil {
		return fmt.Errorf("dev secrets: %w", err)
	}
	// A person trying berth out makes more than three holds in a quarter
	// of an hour, and one browser loads pages faster than an API client:
	// development limits are generous (the environment still wins).
	env := map[string]string{
		"BERTH_HTTP_ADDR":      *addr,
		"BERTH_AUTH_SECRET":    secrets.Auth,
		"BERTH_WEBHOOK_SECRET": secrets.Webhook,
		"BERTH_HOLD_LIMIT":     "100/15m",
		"BERTH_REQUEST_LIMIT":  "1000/1s",
		"BERTH_ADDRESS_LIMIT":  "5000/1s",
	}
	// The environment wins over these.
	lookup := func(k string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return env[k]
	}
	pre, err := config.LoadSome(flag.NewFlagSet("dev", flag.ContinueOnError), nil, lookup, "BERTH_HTTP_ADDR", "BERTH_GATEWAY_URL")
	if err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	// Payments go to the built-in simulator (on the loopback address
	// only), unless a gateway is configured.
	if pre.GatewayURL == "" {
		env["BERTH_PAYSIM"] = "on"
	}
	httpAddr := pre.HTTPAddr
	// berth dev signs in whoever asks (/dev/login, admin included) and keeps
	// its secrets in a file: it is for this machine only.
	if !config.IsLoopback(httpAddr) {
		return fmt.Errorf("berth dev listens on a loopback address only (127.0.0.1:8080, [::1]:8080, localhost:8080), not %q: "+
			"it signs in anyone who asks, as an admin too; to serve other machines, run berth serve", httpAddr)
	}
	// Take the port first: finding it taken after a minute of seeding
	// would waste the minute.
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w\n(another berth, perhaps from another checkout, runs there: stop it, or choose another "+
			"address, e.g. BERTH_HTTP_ADDR=127.0.0.1:8081 make run)", httpAddr, err)
	}
	// Closed by a.Run when it serves; here only when set-up fails first.
	defer func() { _ = ln.Close() }()
	if getenv("BERTH_DATABASE_URL") == "" {
		port := *pgPort
		if port == 0 {
			if port, err = devenv.PortFor(*dir); err != nil {
				return err
			}
		}
		p, err := devenv.StartPostgres(ctx, filepath.Join(*dir, "pg"), port, stderr)
		if err != nil {
			return err
		}
		defer func() {
			if err := p.Stop(); err != nil {
				fmt.Fprintf(stderr, "dev: stop PostgreSQL: %v\n", err)
			}
		}()
		if err := p.EnsureDatabase(ctx, "berth"); err != nil {
			return fmt.Errorf("dev: create database: %w", err)
		}
		env["BERTH_DATABASE_URL"] = p.URL("berth")
	}
	cfg, err := config.Load(nil, lookup)
	if err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	cfg.Migrate = true
	log := newLogger(stderr, cfg.LogLevel)
	a, err := app.New(ctx, cfg, app.Options{Log: log, Dev: true})
	if err != nil {
		return err
	}
	defer a.Close()

	now := clock.System{}.Now()
	sf := seed.Defaults(now)
	sf.Days, sf.PerDay, sf.Progress = *days, *flights, stderr
	if _, _, err := seed.LoadFlights(ctx, a.Pool, sf); err != nil {
		return err
	}
	sc := seed.CarDefaults(now)
	sc.Cars, sc.Bookings, sc.Progress, sc.EventRetention = *cars, *cars*5, stderr, cfg.Events.Retention
	if _, _, err := seed.LoadCars(ctx, a.Pool, sc); err != nil {
		return err
	}
	// Say which limits apply, or their absence looks like a bug to someone
	// trying them.
	d := config.Defaults()
	limits := fmt.Sprintf("Limits for trying things out: BERTH_HOLD_LIMIT=%v BERTH_REQUEST_LIMIT=%v BERTH_ADDRESS_LIMIT=%v\n"+
		"(serve's defaults: %v, %v, %v; set them in the environment to try those).",
		cfg.HoldLimit, cfg.RequestLimit, cfg.AddressLimit, d.HoldLimit, d.RequestLimit, d.AddressLimit)
	printWelcome(stdout, "http://"+ln.Addr().String(), *dir, []byte(cfg.AuthSecret), now, a, limits)
	return a.Run(ctx, ln)
}

func printWelcome(w io.Writer, base, dir string, secret []byte, now time.Time, a *app.App, limits string) {
	tok := func(role string, sub int64) string {
		t, err := auth.Issue(secret, sub, role, now, 30*24*time.Hour)
		if err != nil {
			return "(" + err.Error() + ")"
		}
		return t
	}
	var from, to string
	var date time.Time
	var id int64
	// An example that departs days from now, not minutes: one to hold,
	// pay and still cancel with a full refund.
	_ = a.Pool.QueryRow(context.Background(), `SELECT origin, destination, departure_date, id FROM flight
		WHERE departure_at > $1 ORDER BY departure_at < $1 + interval '2 days', departure_at LIMIT 1`, now).Scan(&from, &to, &date, &id)
	host := seed.DemoHost(context.Background(), a.Pool)
	ict := time.FixedZone("", 7*3600)
	pickup := time.Date(now.Year(), now.Month(), now.Day()+100, 9, 0, 0, 0, ict)
	// The first car the printed search finds, so that the example runs
	// as printed.
	car := int64(0)
	if res, err := a.API.Cars.Search(context.Background(), rental.SearchQuery{City: "HN", From: pickup, To: pickup.Add(72 * time.Hour), Limit: 1}); err == nil && len(res.Cars) > 0 {
		car = res.Cars[0].ID
	}
	// A key of its own each run: the same key with another body is refused
	// (422 idempotency_key_reused), and the demo data outlives a run.
	key := fmt.Sprintf("demo-%d", now.Unix())
	fmt.Fprintf(w, `
berth is running at %[1]s

Tokens (valid 30 days):
  customer (sub 1001): %[2]s
  host     (sub %[14]d): %[3]s
  admin    (sub 1):    %[4]s

Try:
  curl '%[1]s/flights?from=%[5]s&to=%[6]s&date=%[7]s'
  curl %[1]s/flights/%[8]d/seats
  curl -X POST %[1]s/bookings -H 'Authorization: Bearer %[2]s' \
       -d '{"flightId": %[8]d, "fareClass": "ECONOMY", "seats": ["12A", "12B"]}'
  curl '%[1]s/cars?city=HN&from=%[11]s&to=%[12]s'
  curl -X POST %[1]s/bookings -H 'Authorization: Bearer %[2]s' -H 'Idempotency-Key: %[18]s' \
       -d '{"carId": %[17]d, "from": "%[9]s", "to": "%[10]s"}'
  Pay a hold: POST /bookings/{id}/payments (Idempotency-Key) and open the checkoutUrl it returns.

More users: berth token --role customer --sub 1002 (with BERTH_AUTH_SECRET set to the "auth" value of %[15]s),
or in a browser %[1]s/dev/login?role=customer&sub=1002 (any role, any id).

Stop with Ctrl-C. Data stays in %[16]s (delete it to start afresh).

%[13]s

The web app, signed in as demo customer 1001 (host: role=host&sub=%[14]d, admin: role=admin&sub=1):
  %[1]s/dev/login?role=customer&sub=1001&next=/app/flights/%[8]d
`, base, tok(auth.Customer, 1001), tok(auth.Host, host), tok(auth.Admin, 1), from, to, date.Format(time.DateOnly), id,
		pickup.Format(time.RFC3339), pickup.Add(72*time.Hour).Format(time.RFC3339),
		url.QueryEscape(pickup.Format(time.RFC3339)), url.QueryEscape(pickup.Add(72*time.Hour).Format(time.RFC3339)), limits,
		host, filepath.Join(dir, "secrets.json"), dir+string(filepath.Separator), car, key)
}
