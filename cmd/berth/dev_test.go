package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// berth dev signs in anyone who asks: it refuses an address other machines
// reach, before it starts anything.
func TestDevListensOnLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:8080", "example.com:8080"} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"dev", "--dir", t.TempDir(), "--http-addr", addr},
			env(map[string]string{"BERTH_DATABASE_URL": "postgres://127.0.0.1:1/x"}), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("dev --http-addr %s: %v, want a refusal naming loopback", addr, err)
		}
	}
}
