package config

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

const (
	tableBegin = "<!-- settings: made from internal/config/settings.go; BERTH_UPDATE_README=1 go test ./internal/config/ rewrites it -->\n"
	tableEnd   = "<!-- end of settings -->\n"
)

// The tables of settings in the README and in docs/api.md are the list of
// settings, as markdownTable writes it.
func TestSettingsTablesAreCurrent(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"../../README.md", "../../docs/api.md"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(b)
		i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
		if i < 0 || j < i {
			t.Fatalf("%s has no table of settings between %q and %q", path, tableBegin, tableEnd)
		}
		i += len(tableBegin)
		want := markdownTable()
		if doc[i:j] == want {
			continue
		}
		if os.Getenv("BERTH_UPDATE_README") == "1" {
			if err := os.WriteFile(path, []byte(doc[:i]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s's table of settings is not internal/config/settings.go's: run\n"+
			"  BERTH_UPDATE_README=1 go test -run TestSettingsTablesAreCurrent ./internal/config/\nand commit it", path)
	}
}

// Every variable berth serve reads is in the README's and docs/api.md's
// tables.
func TestEveryVariableIsDocumented(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	api, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	if _, err := Load(nil, func(k string) string { asked = append(asked, k); return valid[k] }); err != nil {
		t.Fatal(err)
	}
	if len(asked) < 30 {
		t.Fatalf("Load asked for %d variables: %v", len(asked), asked)
	}
	for _, k := range asked {
		if !strings.Contains(string(readme), "| `"+k+"` |") || !strings.Contains(string(api), "| `"+k+"` |") {
			t.Errorf("README.md or docs/api.md has no row for %s", k)
		}
	}
}

// bad are wrong values of each setting; "" unsets the variable.
var bad = map[string][]string{
	"BERTH_HTTP_ADDR":            {"8080", "localhost"},
	"BERTH_DATABASE_URL":         {"", "mysql://x", "localhost:5432"},
	"BERTH_DATABASE_READ_URL":    {"mysql://x"},
	"BERTH_DB_MAX_CONNS":         {"some", "1", "1001", "-2"},
	"BERTH_DB_MIN_CONNS":         {"some", "-1", "1001"},
	"BERTH_REDIS_URL":            {"localhost:6379", "http://cache"},
	"BERTH_KAFKA_TOPIC":          {"--"}, // through the flag: empty
	"BERTH_EVENTS_IN_SERVE":      {"maybe", "on"},
	"BERTH_EVENT_RETENTION":      {"a week", "1m"},
	"BERTH_OUTBOX_POLL_INTERVAL": {"often", "1ms", "1h"},
	"BERTH_NOTIFY_WEBHOOK_URL":   {"ftp://x", "example.com/notify"},
	"BERTH_CHECKIN_URL":          {"ftp://x"},
	"BERTH_AUTH_SECRET":          {"", "short", "CHANGE-ME-at-least-32-random-bytes", "aaaaaaaaaaaaaaaaaaaa", "                "},
	"BERTH_WEBHOOK_SECRET":       {"", "plain", "whsec_!!!", "whsec_c2hvcnQ="},
	"BERTH_GATEWAY_URL":          {"", "ftp://pay.example.com"},
	"BERTH_PAYSIM":               {"maybe", "on"}, // on, with a gateway
	"BERTH_PICKUP_EARLY":         {"soon", "-1h", "400h"},
	"BERTH_PUBLIC_URL":           {"", "book.example.com"}, // unset, with a gateway on :8080
	"BERTH_FLIGHT_HOLD_TTL":      {"ten minutes", "0s", "25h"},
	"BERTH_CAR_HOLD_TTL":         {"ten minutes", "500ms", "25h"},
	"BERTH_HOLD_EXTENSION":       {"ten minutes", "0s", "25h"},
	"BERTH_WAITLIST_OFFER_TTL":   {"ten minutes", "0s", "25h"},
	"BERTH_SWEEP_INTERVAL":       {"often", "1ms", "25h"},
	"BERTH_HOLD_LIMIT":           {"3 per 15m", "0/1m", "3/0s", "3"},
	"BERTH_PROTECT":              {"maybe"},
	"BERTH_REQUEST_LIMIT":        {"lots", "5/1ns"},
	"BERTH_ADDRESS_LIMIT":        {"lots", "-1/1s"},
	"BERTH_SHED_WAIT":            {"soon", "0s", "11s"},
	"BERTH_READ_MAX_LAG":         {"soon", "10ms"},
	"BERTH_AUDIT_INTERVAL":       {"hourly", "5s"},
	"BERTH_FARE_BUCKETS":         {"some", "0", "65"},
	"BERTH_HOLD_BATCH":           {"some", "0", "1001"},
	"BERTH_HOLD_CONNS":           {"few", "0", "1001"},
	"BERTH_HOLD_FLUSHES":         {"many", "0", "65"},
	"BERTH_LOG_LEVEL":            {"verbose", "INFO"},
	"BERTH_REFUND_EVENT_DATA":    {"view", "Booking"},
	"BERTH_KAFKA_BROKERS":        {",", "kafka-1:9092,,kafka-2:9092", "kafka-1", "k1:abc", ":9092", "k1:0", "k1:99999", "k 2:9092"},
	"BERTH_TRUSTED_PROXIES":      {"proxy", "10.0.0.0/33", "10.0.0.1,,10.0.0.2"},
	// The hook secret is needed once a hook URL is set.
	"BERTH_HOOK_SECRET": {"plain"},
}

// Every setting refuses its wrong values, from the environment and from
// its flag, with a message that names it.
func TestEverySettingRefusesBadValues(t *testing.T) {
	t.Parallel()
	var c Config
	for _, s := range c.settings() {
		if s.env == "" {
			continue
		}
		values, ok := bad[s.env]
		if !ok {
			t.Errorf("%s: no wrong values to try in bad", s.env)
		}
		for _, v := range values {
			m := with(s.env, v)
			var args []string
			switch v {
			case "--":
				delete(m, s.env)
				args = []string{"--" + s.flag + "="}
			case "":
				delete(m, s.env)
			}
			switch s.env {
			case "BERTH_PUBLIC_URL":
				m["BERTH_HTTP_ADDR"] = ":8080"
			case "BERTH_HOOK_SECRET":
				m["BERTH_NOTIFY_WEBHOOK_URL"] = "https://notify.example.com"
			}
			if _, err := Load(args, env(m)); err == nil || !strings.Contains(err.Error(), s.env+": ") {
				t.Errorf("%s=%q: err = %v, want one naming %s", s.env, v, err, s.env)
			}
			if s.flag == "" || v == "" || v == "--" {
				continue
			}
			m = with(s.env, "")
			delete(m, s.env)
			if s.env == "BERTH_PUBLIC_URL" {
				m["BERTH_HTTP_ADDR"] = ":8080"
			}
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(new(bytes.Buffer))
			_, err := LoadFlags(fs, []string{"--" + s.flag + "=" + v}, env(m))
			if err == nil || !strings.Contains(err.Error(), s.env+": ") && !strings.Contains(err.Error(), "-"+s.flag+": ") {
				t.Errorf("--%s=%q: err = %v, want one naming %s or -%s", s.flag, v, err, s.env, s.flag)
			}
		}
	}
}

// The variables keep the names, the flags and the defaults they had
// before the list of settings; a change here is a change for operators.
func TestNamesAndDefaults(t *testing.T) {
	t.Parallel()
	want := map[string]string{ // variable → flag = default
		"BERTH_HTTP_ADDR": "http-addr=:8080", "BERTH_DATABASE_URL": "database-url=", "BERTH_DATABASE_READ_URL": "database-read-url=",
		"BERTH_DB_MAX_CONNS": "db-max-conns=20", "BERTH_DB_MIN_CONNS": "db-min-conns=10", "BERTH_REDIS_URL": "redis-url=",
		"BERTH_KAFKA_BROKERS": "kafka-brokers=", "BERTH_KAFKA_TOPIC": "kafka-topic=booking-events", "BERTH_TRUSTED_PROXIES": "trusted-proxies=",
		"BERTH_EVENTS_IN_SERVE": "events-in-serve=true", "BERTH_EVENT_RETENTION": "event-retention=168h0m0s",
		"BERTH_OUTBOX_POLL_INTERVAL": "outbox-poll-interval=1s", "BERTH_NOTIFY_WEBHOOK_URL": "notify-webhook-url=",
		"BERTH_CHECKIN_URL": "checkin-url=", "BERTH_HOOK_SECRET": "=", "BERTH_AUTH_SECRET": "=", "BERTH_WEBHOOK_SECRET": "=",
		"BERTH_GATEWAY_URL": "gateway-url=", "BERTH_PAYSIM": "paysim=off", "BERTH_PICKUP_EARLY": "pickup-early=2h0m0s",
		"BERTH_PUBLIC_URL": "public-url=", "BERTH_FLIGHT_HOLD_TTL": "flight-hold-ttl=10m0s", "BERTH_CAR_HOLD_TTL": "car-hold-ttl=15m0s",
		"BERTH_HOLD_EXTENSION": "hold-extension=5m0s", "BERTH_WAITLIST_OFFER_TTL": "waitlist-offer-ttl=10m0s",
		"BERTH_SWEEP_INTERVAL": "sweep-interval=30s", "BERTH_HOLD_LIMIT": "hold-limit=3/15m", "BERTH_PROTECT": "protect=on",
		"BERTH_REQUEST_LIMIT": "request-limit=100/1s", "BERTH_ADDRESS_LIMIT": "address-limit=1000/1s",
		"BERTH_SHED_WAIT": "shed-wait=150ms", "BERTH_READ_MAX_LAG": "read-max-lag=5s", "BERTH_AUDIT_INTERVAL": "audit-interval=0s",
		"BERTH_FARE_BUCKETS": "fare-buckets=1", "BERTH_HOLD_BATCH": "hold-batch=64", "BERTH_HOLD_CONNS": "hold-conns=4",
		"BERTH_HOLD_FLUSHES": "hold-flushes=4", "BERTH_REFUND_EVENT_DATA": "refund-event-data=booking",
		"BERTH_LOG_LEVEL": "log-level=info",
		"":                "migrate=false",
	}
	c := Defaults()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.Flags(fs)
	got := map[string]string{}
	for _, s := range c.settings() {
		def := ""
		if f := fs.Lookup(s.flag); f != nil {
			def = f.DefValue
		}
		got[s.env] = s.flag + "=" + def
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%q: %q, want %q", k, got[k], w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%q: new; add it to this test", k)
		}
	}
}

// Every secret is marked so, and -h shows none of them, whether it came
// from the environment or a flag default.
func TestHelpMasksEverySecret(t *testing.T) {
	t.Parallel()
	c := Defaults()
	settings := c.settings()
	var secrets []string
	for i, s := range settings {
		if strings.Contains(s.env, "SECRET") && s.secret != hidden {
			t.Errorf("%s: not marked secret", s.env)
		}
		if s.secret == public {
			continue
		}
		secret := fmt.Sprintf("Secret-%d-value", i)
		v := secret
		if s.secret == urlPassword {
			v = "scheme://user:" + secret + "@host/x"
		}
		if err := s.v.set(v); err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, secret)
	}
	if len(secrets) < 7 {
		t.Fatalf("%d secrets, want the 4 URLs and the 3 keys", len(secrets))
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	c.Flags(fs)
	fs.PrintDefaults()
	for _, secret := range secrets {
		if strings.Contains(out.String(), secret) {
			t.Errorf("-h shows %q:\n%s", secret, out.String())
		}
	}
}

// A rate's window prints as it is written, so that -h and the README show
// the default that is set.
func TestRateRoundTrip(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"off": "off", "3/15m": "3/15m", "100/1s": "100/1s", "1/10s": "1/10s", "5/30s": "5/30s", "2/1h": "2/1h",
		"7/90m": "7/1h30m", "1/100ms": "1/100ms", "4/1h30m": "4/1h30m", "2/20m10s": "2/20m10s", "1/10h": "1/10h",
	} {
		var r Rate
		if err := r.Set(in); err != nil {
			t.Fatal(err)
		}
		if r.String() != want {
			t.Errorf("Set(%q).String() = %q, want %q", in, r.String(), want)
		}
	}
}

// A command that takes a few of serve's settings reads them as serve does,
// and is not held to the settings it does not take.
func TestLoadSome(t *testing.T) {
	t.Parallel()
	load := func(args []string, m map[string]string) (Config, error) {
		fs := flag.NewFlagSet("audit", flag.ContinueOnError)
		fs.SetOutput(new(bytes.Buffer))
		return LoadSome(fs, args, env(m), "BERTH_DATABASE_URL", "BERTH_SWEEP_INTERVAL")
	}
	c, err := load([]string{"--sweep-interval", "1m"}, map[string]string{"BERTH_DATABASE_URL": "postgres://h/db", "BERTH_SWEEP_INTERVAL": "5m"})
	if err != nil || c.DatabaseURL != "postgres://h/db" || c.SweepInterval != time.Minute {
		t.Errorf("flag over env: %q %s, %v", c.DatabaseURL, c.SweepInterval, err)
	}
	if c, err = load(nil, map[string]string{"BERTH_DATABASE_URL": "postgres://h/db"}); err != nil || c.SweepInterval != 30*time.Second {
		t.Errorf("default: %s, %v", c.SweepInterval, err)
	}
	for _, tt := range []struct {
		args []string
		m    map[string]string
		want string
	}{
		{nil, map[string]string{}, "BERTH_DATABASE_URL: is required"},
		{nil, map[string]string{"BERTH_DATABASE_URL": "mysql://h/db"}, "BERTH_DATABASE_URL: must be"},
		{nil, map[string]string{"BERTH_DATABASE_URL": "postgres://h/db", "BERTH_SWEEP_INTERVAL": "often"}, "BERTH_SWEEP_INTERVAL: \"often\" is not a duration"},
		{[]string{"--sweep-interval", "1ms"}, map[string]string{"BERTH_DATABASE_URL": "postgres://h/db"}, "BERTH_SWEEP_INTERVAL: 1ms must be between"},
		{[]string{"--hold-batch", "3"}, map[string]string{"BERTH_DATABASE_URL": "postgres://h/db"}, "flag provided but not defined: -hold-batch"},
	} {
		if _, err := load(tt.args, tt.m); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v %v: %v, want %q", tt.args, tt.m, err, tt.want)
		}
	}
}

// berth worker refuses to start without BERTH_PUBLIC_URL, from the
// environment or its flag, even where serve needs none (the simulator on
// loopback): the refunds it starts tell the gateway where their webhooks
// go, and a worker has no address of its own that the gateway reaches.
func TestWorkerRefusesBadValues(t *testing.T) {
	t.Parallel()
	load := func(name string, args []string, m map[string]string) error {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.SetOutput(new(bytes.Buffer))
		_, err := LoadFlags(fs, args, env(m))
		return err
	}
	for _, m := range []map[string]string{with("BERTH_GATEWAY_URL", "https://pay.example.com"), with("BERTH_PAYSIM", "on")} {
		delete(m, "BERTH_PUBLIC_URL")
		if m["BERTH_PAYSIM"] == "on" {
			delete(m, "BERTH_GATEWAY_URL")
		}
		m["BERTH_HTTP_ADDR"] = "127.0.0.1:8080"
		if err := load("serve", nil, m); err != nil {
			t.Errorf("serve on loopback without a public URL: %v", err)
		}
		if err := load("worker", nil, m); err == nil || !strings.Contains(err.Error(), "BERTH_PUBLIC_URL: is required for berth worker") {
			t.Errorf("worker without a public URL: err = %v, want one naming BERTH_PUBLIC_URL", err)
		}
		if err := load("worker", []string{"--public-url", "https://book.example.com"}, m); err != nil {
			t.Errorf("worker with --public-url: %v", err)
		}
		m["BERTH_PUBLIC_URL"] = "https://book.example.com"
		if err := load("worker", nil, m); err != nil {
			t.Errorf("worker with BERTH_PUBLIC_URL: %v", err)
		}
		if err := load("worker", []string{"--public-url", "book.example.com"}, m); err == nil || !strings.Contains(err.Error(), "BERTH_PUBLIC_URL: must be") {
			t.Errorf("worker with --public-url book.example.com: err = %v, want one naming BERTH_PUBLIC_URL", err)
		}
	}
}

// An on/off switch's flag takes what its variable takes (-protect=off was
// refused as "invalid boolean value"), and alone it is on.
func TestOnOffFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--protect=off"}, false}, {[]string{"--protect=on"}, true}, {[]string{"--protect=false"}, false},
		{[]string{"--protect"}, true}, {nil, true},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(new(bytes.Buffer))
		cfg, err := LoadFlags(fs, c.args, env(with("BERTH_PROTECT", "")))
		if err != nil || cfg.Protect != c.want {
			t.Errorf("%v: protect %v, %v; want %v", c.args, cfg.Protect, err, c.want)
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer))
	if _, err := LoadFlags(fs, []string{"--protect=maybe"}, env(with("BERTH_PROTECT", ""))); err == nil {
		t.Error("--protect=maybe accepted")
	}
}
