package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/auth"
)

// berth token reads BERTH_AUTH_SECRET as serve does (its rules too: at
// least 16 characters), and --secret wins over it.
func TestTokenReadsTheAuthSecretAsServeDoes(t *testing.T) {
	const fromEnv, fromFlag = "env-secret-0123456789", "flag-secret-0123456789"
	token := func(getenv func(string) string, args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"token", "--role", "admin", "--sub", "7"}, args...), getenv, &out, &bytes.Buffer{})
		return strings.TrimSpace(out.String()), err
	}
	for _, tc := range []struct {
		name, env, want string
		args            []string
	}{
		{"from the environment", fromEnv, fromEnv, nil},
		{"from the flag", fromEnv, fromFlag, []string{"--secret", fromFlag}},
		{"from the flag alone", "", fromFlag, []string{"--secret", fromFlag}},
	} {
		tok, err := token(env(map[string]string{"BERTH_AUTH_SECRET": tc.env}), tc.args...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if c, err := auth.Verify([]byte(tc.want), tok, time.Now()); err != nil || c.ID != 7 || c.Role != "admin" {
			t.Errorf("%s: the token does not verify with the secret given (%v, %+v)", tc.name, err, c)
		}
	}
	for _, secret := range []string{"", "short", "CHANGE-ME-at-least-32-random-bytes"} {
		if _, err := token(env(map[string]string{"BERTH_AUTH_SECRET": secret})); err == nil || !strings.Contains(err.Error(), "BERTH_AUTH_SECRET: ") {
			t.Errorf("BERTH_AUTH_SECRET=%q: %v, want an error naming BERTH_AUTH_SECRET", secret, err)
		}
	}
	for _, ttl := range []string{"0s", "-1h"} {
		if tok, err := token(env(map[string]string{"BERTH_AUTH_SECRET": fromEnv}), "--ttl", ttl); err == nil {
			t.Errorf("--ttl %s: printed %q, want an error", ttl, tok)
		}
	}
}

// berth paysim reads BERTH_WEBHOOK_SECRET as serve does.
func TestPaysimReadsTheWebhookSecretAsServeDoes(t *testing.T) {
	for _, secret := range []string{"", "plain", "whsec_c2hvcnQ="} {
		err := run(context.Background(), []string{"paysim", "--addr", "127.0.0.1:0"}, env(map[string]string{"BERTH_WEBHOOK_SECRET": secret}),
			&bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "BERTH_WEBHOOK_SECRET: ") {
			t.Errorf("BERTH_WEBHOOK_SECRET=%q: %v, want an error naming BERTH_WEBHOOK_SECRET", secret, err)
		}
	}
}
