package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"time"

	"berth.dev/berth/internal/config"
)

// version and commit are stamped by scripts/release-build.sh
// (-ldflags "-X main.version=… -X main.commit=…"); a plain `go build`
// leaves "dev" and whatever the Go toolchain recorded.
var (
	version = "dev"
	commit  = ""
)

// buildInfo is the version and commit of this binary: the stamped ones, else
// the VCS revision the toolchain recorded, else "unknown".
func buildInfo() (ver, rev string) {
	ver, rev = version, commit
	if rev == "" {
		rev = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					rev = s.Value
				}
			}
		}
	}
	return ver, rev
}

func versionCmd(stdout io.Writer) error {
	ver, rev := buildInfo()
	fmt.Fprintf(stdout, "berth %s commit %s %s %s/%s\n", ver, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}

// probe asks a URL of a running berth (by default its /healthz) and exits 0
// on a 2xx answer, 1 otherwise: the container health check of an image that
// has no shell and no curl.
func probe(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := newFlags("probe")
	fs.SetOutput(stderr)
	url := fs.String("url", "", "the URL to ask (default: /healthz on BERTH_HTTP_ADDR)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	c, err := config.LoadSome(fs, args, getenv, "BERTH_HTTP_ADDR")
	if err != nil {
		return err
	}
	if *url == "" {
		*url = probeURL(c.HTTPAddr, "/healthz")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, http.NoBody)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s: %w", *url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("probe %s: %s", *url, resp.Status)
	}
	return nil
}

// probeURL turns a listen address (":8080", "0.0.0.0:8080", "[::]:8080")
// into a loopback URL with path.
func probeURL(listen, path string) string {
	host, port := "127.0.0.1", listen
	for i := len(listen) - 1; i >= 0; i-- {
		if listen[i] == ':' {
			h := listen[:i]
			port = listen[i+1:]
			if h != "" && h != "0.0.0.0" && h != "[::]" && h != "::" {
				host = h
			}
			break
		}
	}
	return "http://" + host + ":" + port + path
}
