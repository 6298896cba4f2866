package httpapi

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// A dependency's readiness is logged when it changes, not at every probe.
func TestReadinessIsLoggedWhenItChanges(t *testing.T) {
	var buf bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&buf, nil)), readiness: map[string]string{}}
	down := errors.Join(ErrDegraded, errors.New("dial tcp: connection refused"))
	for _, state := range []string{"ok", "ok", "degraded", "degraded", "degraded", "ok", "ok", "unavailable", "unavailable"} {
		var err error
		switch state {
		case "degraded":
			err = down
		case "unavailable":
			err = errors.New("no database")
		}
		s.noteReadiness("redis", state, err)
	}
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		_, rest, _ := strings.Cut(line, "msg=")
		msgs = append(msgs, strings.Fields(rest)[0])
	}
	if got, want := strings.Join(msgs, ","), `degraded,"ready,"not`; got != want {
		t.Errorf("logged %q:\n%s\nwant one line per change (%s)", got, buf.String(), want)
	}
}
