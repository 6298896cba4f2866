package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestVersionPrintsStampedVersionAndCommit(t *testing.T) {
	version, commit = "v1.2.3", "abc1234"
	t.Cleanup(func() { version, commit = "dev", "" })
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, env(nil), &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "berth v1.2.3 commit abc1234 ") {
		t.Errorf("berth version = %q", out.String())
	}
}

func TestProbe(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	getenv := env(map[string]string{"BERTH_HTTP_ADDR": addr})
	if err := run(context.Background(), []string{"probe"}, getenv, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Errorf("probe of a healthy berth: %v", err)
	}
	status = http.StatusServiceUnavailable
	if err := run(context.Background(), []string{"probe"}, getenv, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("probe of an unhealthy berth: %v, want 503", err)
	}
	if err := run(context.Background(), []string{"probe", "--url", "http://127.0.0.1:1/healthz"}, getenv, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Error("probe of nothing listening succeeded")
	}
}

func TestProbeURL(t *testing.T) {
	for listen, want := range map[string]string{
		":8080":          "http://127.0.0.1:8080/healthz",
		"0.0.0.0:9000":   "http://127.0.0.1:9000/healthz",
		"[::]:8080":      "http://127.0.0.1:8080/healthz",
		"10.0.0.5:8080":  "http://10.0.0.5:8080/healthz",
		"127.0.0.1:8081": "http://127.0.0.1:8081/healthz",
	} {
		if got := probeURL(listen, "/healthz"); got != want {
			t.Errorf("probeURL(%q) = %q, want %q", listen, got, want)
		}
	}
}
