package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

var valid = map[string]string{
	"BERTH_DATABASE_URL":   "postgres://postgres@127.0.0.1:5432/berth",
	"BERTH_AUTH_SECRET":    "0123456789abcdef0123",
	"BERTH_WEBHOOK_SECRET": "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM=",
	"BERTH_GATEWAY_URL":    "https://pay.example.com",
	"BERTH_PUBLIC_URL":     "https://book.example.com",
}

func with(k, v string) map[string]string {
	m := map[string]string{}
	for kk, vv := range valid {
		m[kk] = vv
	}
	m[k] = v
	return m
}

func TestLoadDefaultsEnvFlags(t *testing.T) {
	t.Parallel()
	c, err := Load([]string{"--flight-hold-ttl", "5m"}, env(with("BERTH_FLIGHT_HOLD_TTL", "7m")))
	if err != nil {
		t.Fatal(err)
	}
	if c.FlightHoldTTL != 5*time.Minute {
		t.Errorf("flag should override env: FlightHoldTTL = %s", c.FlightHoldTTL)
	}
	if c.CarHoldTTL != 15*time.Minute || c.SweepInterval != 30*time.Second || c.HTTPAddr != ":8080" {
		t.Errorf("defaults not applied: %+v", c)
	}
	if c.HoldLimit != (Rate{3, 15 * time.Minute}) {
		t.Errorf("HoldLimit = %v, want 3/15m", c.HoldLimit)
	}
}

func TestValidateNamesTheSetting(t *testing.T) {
	t.Parallel()
	tests := []struct{ key, value, want string }{
		{"BERTH_DATABASE_URL", "", "BERTH_DATABASE_URL"},
		{"BERTH_DATABASE_URL", "mysql://x", "BERTH_DATABASE_URL"},
		{"BERTH_AUTH_SECRET", "short", "BERTH_AUTH_SECRET"},
		{"BERTH_WEBHOOK_SECRET", "plain", "BERTH_WEBHOOK_SECRET"},
		{"BERTH_WEBHOOK_SECRET", "whsec_!!!", "BERTH_WEBHOOK_SECRET"},
		{"BERTH_FLIGHT_HOLD_TTL", "ten minutes", "BERTH_FLIGHT_HOLD_TTL"},
		{"BERTH_SWEEP_INTERVAL", "1ms", "BERTH_SWEEP_INTERVAL"},
		{"BERTH_HOLD_LIMIT", "3 per 15m", "BERTH_HOLD_LIMIT"},
		{"BERTH_HTTP_ADDR", "8080", "BERTH_HTTP_ADDR"},
		{"BERTH_REDIS_URL", "localhost:6379", "BERTH_REDIS_URL"},
		{"BERTH_REQUEST_LIMIT", "lots", "BERTH_REQUEST_LIMIT"},
		{"BERTH_SHED_WAIT", "0s", "BERTH_SHED_WAIT"},
		{"BERTH_SHED_WAIT", "soon", "BERTH_SHED_WAIT"},
		{"BERTH_AUDIT_INTERVAL", "5s", "BERTH_AUDIT_INTERVAL"},
		{"BERTH_AUDIT_INTERVAL", "hourly", "BERTH_AUDIT_INTERVAL"},
		{"BERTH_DB_MIN_CONNS", "-1", "BERTH_DB_MIN_CONNS"},
		{"BERTH_DB_MIN_CONNS", "some", "BERTH_DB_MIN_CONNS"},
	}
	for _, tt := range tests {
		m := with(tt.key, tt.value)
		if tt.value == "" {
			delete(m, tt.key)
		}
		_, err := Load(nil, env(m))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s=%q: err = %v, want one naming %s", tt.key, tt.value, err, tt.want)
		}
	}
}

func TestSurgeSettings(t *testing.T) {
	t.Parallel()
	c, err := Load(nil, env(valid))
	if err != nil {
		t.Fatal(err)
	}
	if c.RequestLimit != (Rate{100, time.Second}) || c.ShedWait != 150*time.Millisecond {
		t.Errorf("defaults: RequestLimit %v, ShedWait %s", c.RequestLimit, c.ShedWait)
	}
	m := with("BERTH_REQUEST_LIMIT", "off")
	m["BERTH_HOLD_LIMIT"] = "5/1m"
	m["BERTH_SHED_WAIT"] = "250ms"
	if c, err = Load(nil, env(m)); err != nil {
		t.Fatal(err)
	}
	if !c.RequestLimit.Off() || c.RequestLimit.String() != "off" {
		t.Errorf("BERTH_REQUEST_LIMIT=off gave %v", c.RequestLimit)
	}
	if c.HoldLimit != (Rate{5, time.Minute}) || c.ShedWait != 250*time.Millisecond {
		t.Errorf("HoldLimit %v, ShedWait %s", c.HoldLimit, c.ShedWait)
	}
	if c, err = Load([]string{"--hold-limit", "off", "--request-limit", "50/1s"}, env(valid)); err != nil {
		t.Fatal(err)
	}
	if !c.HoldLimit.Off() || c.RequestLimit != (Rate{50, time.Second}) {
		t.Errorf("flags: HoldLimit %v, RequestLimit %v", c.HoldLimit, c.RequestLimit)
	}
}

// With a real gateway, processes that others can reach must share one public
// URL for webhooks; on loopback (one machine, development) the listen
// address will do.
func TestPublicURLWithGateway(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr, public string
		ok           bool
	}{
		{":8080", "", false},
		{"0.0.0.0:8080", "", false},
		{"10.0.0.5:8080", "", false},
		{":8080", "https://book.example.com", true},
		{"127.0.0.1:8080", "", true},
		{"[::1]:8080", "", true},
		{"localhost:8080", "", true},
	}
	for _, tt := range tests {
		m := with("BERTH_GATEWAY_URL", "https://pay.example.com")
		m["BERTH_HTTP_ADDR"] = tt.addr
		delete(m, "BERTH_PUBLIC_URL")
		if tt.public != "" {
			m["BERTH_PUBLIC_URL"] = tt.public
		}
		_, err := Load(nil, env(m))
		if tt.ok && err != nil {
			t.Errorf("addr %q public %q: %v", tt.addr, tt.public, err)
		}
		if !tt.ok && (err == nil || !strings.Contains(err.Error(), "BERTH_PUBLIC_URL: is required")) {
			t.Errorf("addr %q without a public URL: err = %v, want one naming BERTH_PUBLIC_URL", tt.addr, err)
		}
	}
	// The built-in simulator (loopback only) needs no public URL.
	m := with("BERTH_PAYSIM", "on")
	m["BERTH_HTTP_ADDR"] = "127.0.0.1:8080"
	delete(m, "BERTH_GATEWAY_URL")
	delete(m, "BERTH_PUBLIC_URL")
	if _, err := Load(nil, env(m)); err != nil {
		t.Errorf("simulator on loopback: %v", err)
	}
}

// A BERTH_ variable that is no setting is named with the setting it is
// probably a misspelling of; settings and the test harness's variables are
// not.
func TestUnknownVariables(t *testing.T) {
	got := Unknown([]string{"BERTH_DATABSE_URL=postgres://x", "BERTH_HOLD_LIMIT=3/15m", "BERTH_TEST_DATABASE_URL=x",
		"PATH=/bin", "BERTH_FROBNICATE=1", "BERTH_HOLDLIMIT=2/1m", "BERTH_TRUSTED_PROXY=10.0.0.1"})
	want := []string{
		"BERTH_DATABSE_URL is not a setting of berth and is ignored; did you mean BERTH_DATABASE_URL?",
		"BERTH_FROBNICATE is not a setting of berth and is ignored",
		"BERTH_HOLDLIMIT is not a setting of berth and is ignored; did you mean BERTH_HOLD_LIMIT?",
		"BERTH_TRUSTED_PROXY is not a setting of berth and is ignored; did you mean BERTH_TRUSTED_PROXIES?",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Unknown = %q, want %q", got, want)
	}
}

// A trusted proxy is an address or a range; IPv4 in IPv6's mapped form is
// read as IPv4, as peers' addresses are; a zone is refused.
func TestParsePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.7": "10.0.0.7/32", "10.1.2.3/8": "10.0.0.0/8", "::1": "::1/128", "2001:db8::/32": "2001:db8::/32",
		"::ffff:127.0.0.1": "127.0.0.1/32", "::ffff:10.0.0.0/104": "10.0.0.0/8",
	} {
		if p, err := ParsePrefix(in); err != nil || p.String() != want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, in := range []string{"fe80::1%eth0", "proxy", "10.0.0.0/33", ""} {
		if p, err := ParsePrefix(in); err == nil {
			t.Errorf("ParsePrefix(%q) = %v, want an error", in, p)
		}
	}
}
