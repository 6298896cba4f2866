package config

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"
)

// Without a gateway, serve refuses to start unless the simulator is asked
// for, and the simulator only on a loopback address; the message names
// both ways out.
func TestPaySimIsOptInAndLoopbackOnly(t *testing.T) {
	t.Parallel()
	noGateway := with("BERTH_GATEWAY_URL", "")
	delete(noGateway, "BERTH_GATEWAY_URL")
	_, err := Load(nil, env(noGateway))
	if err == nil || !strings.Contains(err.Error(), "BERTH_GATEWAY_URL") || !strings.Contains(err.Error(), "BERTH_PAYSIM=on") {
		t.Errorf("no gateway, no simulator: %v, want a refusal naming BERTH_GATEWAY_URL and BERTH_PAYSIM=on", err)
	}
	for addr, ok := range map[string]bool{
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "192.168.1.5:8080": false, "example.com:8080": false,
		"127.0.0.1:8080": true, "127.0.0.2:0": true, "[::1]:8080": true, "localhost:8080": true, "LOCALHOST:1": true,
	} {
		m := with("BERTH_PAYSIM", "on")
		delete(m, "BERTH_GATEWAY_URL")
		m["BERTH_HTTP_ADDR"] = addr
		c, err := Load(nil, env(m))
		switch {
		case ok && (err != nil || !c.PaySim):
			t.Errorf("BERTH_PAYSIM=on on %s: %v, want accepted", addr, err)
		case !ok && (err == nil || !strings.Contains(err.Error(), "BERTH_PAYSIM")):
			t.Errorf("BERTH_PAYSIM=on on %s: %v, want refused naming BERTH_PAYSIM", addr, err)
		}
	}
	both := with("BERTH_PAYSIM", "on")
	both["BERTH_HTTP_ADDR"] = "127.0.0.1:8080"
	if _, err := Load(nil, env(both)); err == nil {
		t.Error("BERTH_PAYSIM=on with BERTH_GATEWAY_URL: accepted, want refused (which one takes payments?)")
	}
	if _, err := Load(nil, env(with("BERTH_PAYSIM", "maybe"))); err == nil || !strings.Contains(err.Error(), "BERTH_PAYSIM") {
		t.Errorf("BERTH_PAYSIM=maybe: %v", err)
	}
	if c, err := Load(nil, env(valid)); err != nil || c.PaySim {
		t.Errorf("default: %v, PaySim %v; want off", err, c.PaySim)
	}
}

func TestPickupEarly(t *testing.T) {
	t.Parallel()
	c, err := Load(nil, env(valid))
	if err != nil || c.PickupEarly != 2*time.Hour {
		t.Errorf("default PickupEarly %s, %v; want 2h", c.PickupEarly, err)
	}
	if c, err := Load(nil, env(with("BERTH_PICKUP_EARLY", "30m"))); err != nil || c.PickupEarly != 30*time.Minute {
		t.Errorf("BERTH_PICKUP_EARLY=30m: %s, %v", c.PickupEarly, err)
	}
	for _, v := range []string{"-1h", "soon", "400h"} {
		if _, err := Load(nil, env(with("BERTH_PICKUP_EARLY", v))); err == nil || !strings.Contains(err.Error(), "BERTH_PICKUP_EARLY") {
			t.Errorf("BERTH_PICKUP_EARLY=%s: %v, want refused", v, err)
		}
	}
}

// -h never shows a secret: URLs with their password masked.
func TestHelpMasksSecrets(t *testing.T) {
	t.Parallel()
	m := with("BERTH_DATABASE_URL", "postgres://berth:pg-Secret-1@db:5432/berth")
	m["BERTH_DATABASE_READ_URL"] = "postgres://reader:pg-Secret-2@db2:5432/berth"
	m["BERTH_REDIS_URL"] = "redis://:redis-Secret-3@cache:6379/0"
	m["BERTH_GATEWAY_URL"] = "https://shop:gw-Secret-4@pay.example.com"
	c, err := Load(nil, env(m))
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	c.Flags(fs)
	fs.PrintDefaults()
	help := out.String()
	for _, secret := range []string{"pg-Secret-1", "pg-Secret-2", "redis-Secret-3", "gw-Secret-4", m["BERTH_AUTH_SECRET"], m["BERTH_WEBHOOK_SECRET"]} {
		if strings.Contains(help, secret) {
			t.Errorf("-h shows %q:\n%s", secret, help)
		}
	}
	if !strings.Contains(help, "postgres://berth:xxxxx@db:5432/berth") {
		t.Errorf("-h should show the database URL with its password masked:\n%s", help)
	}
	// Flags still set the real value.
	if err := fs.Parse([]string{"--database-url", "postgres://u:new-pass@h/db"}); err != nil || c.DatabaseURL != "postgres://u:new-pass@h/db" {
		t.Errorf("--database-url: %q, %v", c.DatabaseURL, err)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                                     "",
		"postgres://u:p@h:5432/db":             "postgres://u:xxxxx@h:5432/db",
		"postgres://u@h/db":                    "postgres://u@h/db",
		"postgres://h/db?password=p&sslmode=x": "postgres://h/db?password=xxxxx&sslmode=x",
		"host=h user=u password=p":             "(set)",
		"redis://:p@h:6379":                    "redis://:xxxxx@h:6379",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	s := "s3cr3t-value"
	SecretVar(fs, &s, "secret", "a secret")
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.PrintDefaults()
	if strings.Contains(out.String(), s) || !strings.Contains(out.String(), "(set)") {
		t.Errorf("secret flag help: %s", out.String())
	}
}
