package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/seed"
)

// Every request berth dev prints under "Try:" works as printed, pasted
// into a shell: a new user's first requests are these.
func TestWelcomeExamplesWorkAsPrinted(t *testing.T) {
	s := apptest.Start(t, apptest.Options{})
	now := s.Clock.Now()
	ctx := context.Background()
	sf := seed.Defaults(now)
	sf.Days, sf.PerDay = 3, 20
	if _, _, err := seed.LoadFlights(ctx, s.App.Pool, sf); err != nil {
		t.Fatal(err)
	}
	sc := seed.CarDefaults(now)
	sc.Cars, sc.Bookings, sc.EventRetention = 40, 200, 7*24*time.Hour
	if _, _, err := seed.LoadCars(ctx, s.App.Pool, sc); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printWelcome(&out, s.URL, ".berth", []byte(apptest.AuthSecret), now, s.App, "")
	text := out.String()
	start := strings.Index(text, "Try:\n")
	if start < 0 {
		t.Fatalf("no examples in:\n%s", text)
	}
	// Each example is a curl line, continued by a trailing backslash.
	var cmds []string
	for _, line := range strings.Split(text[start:], "\n")[1:] {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "curl "):
			cmds = append(cmds, line)
		case len(cmds) > 0 && strings.HasSuffix(cmds[len(cmds)-1], `\`):
			cmds[len(cmds)-1] = strings.TrimSuffix(cmds[len(cmds)-1], `\`) + " " + line
		}
	}
	if len(cmds) < 5 {
		t.Fatalf("%d examples, want the 5 printed:\n%s", len(cmds), text)
	}
	for _, cmd := range cmds {
		req := curlRequest(t, cmd)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Errorf("%s\n→ %d %s", cmd, resp.StatusCode, body)
		}
	}
}

// curlRequest reads the request of a printed curl command: its URL, -X,
// -H and -d, each argument bare or in single quotes, as a shell reads them.
func curlRequest(t *testing.T, cmd string) *http.Request {
	t.Helper()
	var args []string
	for rest := strings.TrimSpace(strings.TrimPrefix(cmd, "curl ")); rest != ""; rest = strings.TrimSpace(rest) {
		if rest[0] == '\'' {
			end := strings.IndexByte(rest[1:], '\'')
			if end < 0 {
				t.Fatalf("unclosed quote in %s", cmd)
			}
			args, rest = append(args, rest[1:end+1]), rest[end+2:]
			continue
		}
		arg, after, _ := strings.Cut(rest, " ")
		args, rest = append(args, arg), after
	}
	method, url, body := http.MethodGet, "", ""
	header := http.Header{}
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-X":
			i++
			method = args[i]
		case "-H":
			i++
			k, v, _ := strings.Cut(args[i], ":")
			header.Add(k, strings.TrimSpace(v))
		case "-d":
			i++
			body = args[i]
		default:
			url = args[i]
		}
	}
	if body != "" {
		// What curl -d sends unless told otherwise.
		header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	req.Header = header
	return req
}
