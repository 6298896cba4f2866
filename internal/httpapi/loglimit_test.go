package httpapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
)

// An overload's refusals are each answered 503, but logged once a second
// for each route, with how many were left out; another route's refusal is
// not hidden by the flood.
func TestRefusalsAreLoggedOnceASecondForEachRoute(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	clk := clock.NewFake(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
	s := &Server{Deps: Deps{Clock: clk}, log: slog.New(slog.NewJSONHandler(&out, nil)), refusals: newLineLimit(time.Second)}
	refuse := func(pattern, path string) {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, path, nil)
		r.Pattern = pattern
		w := httptest.NewRecorder()
		s.writeError(w, r, fault.New(fault.Overloaded, "too many hold requests at once"))
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want 503", w.Code)
		}
	}
	lines := func() []map[string]any {
		t.Helper()
		var got []map[string]any
		for _, l := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
			if len(l) == 0 {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			got = append(got, m)
		}
		out.Reset()
		return got
	}

	for range 50 {
		refuse("POST /bookings", "/bookings")
		clk.Advance(10 * time.Millisecond) // 50 in half a second
	}
	if got := lines(); len(got) != 1 || got[0]["msg"] != "request refused" || got[0]["left_out"] != nil {
		t.Fatalf("50 refusals in half a second logged %v, want one line without left_out", got)
	}
	refuse("POST /bookings/{id}/payments", "/bookings/7/payments")
	if got := lines(); len(got) != 1 || got[0]["path"] != "/bookings/7/payments" {
		t.Fatalf("another route's refusal logged %v, want its own line", got)
	}
	clk.Advance(600 * time.Millisecond) // a second after the first line
	refuse("POST /bookings", "/bookings")
	if got := lines(); len(got) != 1 || got[0]["left_out"] != float64(49) {
		t.Fatalf("the next second's first refusal logged %v, want one line with left_out 49", got)
	}
}
