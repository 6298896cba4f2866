package rental_test

import (
	"net/http"
	"strings"
	"testing"

	"berth.dev/berth/internal/app/apptest"
)

// A car's text is text: valid UTF-8 without NUL, control characters or
// bidirectional overrides, its length counted in characters, its currency
// an ISO 4217 code, its city one of the cities berth knows, and its plate
// one plate however it is typed. Each refusal is 422 naming the field and
// lists nothing.
func TestCarInputIsChecked(t *testing.T) {
	t.Parallel()
	e := start(t)
	host := e.s.Token("host", 500)
	car := func(mut func(m map[string]any)) map[string]any {
		m := map[string]any{"plate": "30A-123.45", "model": "Toyota Vios", "city": "HN", "dailyPrice": 800000,
			"deposit": 2000000, "currency": "VND", "turnaround": "2h"}
		mut(m)
		return m
	}
	list := func(body any) *apptest.Response {
		return e.s.Do(apptest.Request{Method: http.MethodPost, Path: "/host/cars", Token: host, Body: body})
	}
	before := snapshot(t, e.pool())
	for _, c := range []struct {
		name, field string
		body        any
	}{
		{"NUL in the model", "model", car(func(m map[string]any) { m["model"] = "Vi\x00os" })},
		{"a control character", "model", car(func(m map[string]any) { m["model"] = "Vi\x1b[31mos" })},
		{"a new line", "model", car(func(m map[string]any) { m["model"] = "Vios\nVF8" })},
		{"a right-to-left override", "model", car(func(m map[string]any) { m["model"] = "Vios \u202Egnp.exe" })},
		{"101 characters", "model", car(func(m map[string]any) { m["model"] = strings.Repeat("🚗", 101) })},
		{"a zero-width space alone", "model", car(func(m map[string]any) { m["model"] = "\u200b" })},
		{"a byte order mark first", "model", car(func(m map[string]any) { m["model"] = "\ufeffVios" })},
		{"a line separator", "model", car(func(m map[string]any) { m["model"] = "Vios\u2028VF8" })},
		{"a joiner alone", "model", car(func(m map[string]any) { m["model"] = "\u200d" })},
		{"NUL in the plate", "plate", car(func(m map[string]any) { m["plate"] = "30A\x00123" })},
		{"currency XYZ", "currency", car(func(m map[string]any) { m["currency"] = "XYZ" })},
		{"city XX", "city", car(func(m map[string]any) { m["city"] = "XX" })},
	} {
		r := list(c.body)
		if _, code, field := problem(t, r); r.Status != http.StatusUnprocessableEntity || code != "validation_failed" || field != c.field {
			t.Errorf("%s: %d %s, want 422 naming %s", c.name, r.Status, r.Body, c.field)
		}
	}
	if after := snapshot(t, e.pool()); after != before {
		t.Errorf("refused cars changed the database: %+v → %+v", before, after)
	}

	// 26 emoji are 26 characters, not "over 100" bytes.
	if r := list(car(func(m map[string]any) { m["model"] = strings.Repeat("🚗", 26) })); r.Status != http.StatusCreated {
		t.Fatalf("a model of 26 emoji: %d %s, want 201", r.Status, r.Body)
	}
	for _, plate := range []string{"30a 123.45", "30A12345", "30A.123-45"} {
		r := list(car(func(m map[string]any) { m["plate"] = plate }))
		if _, _, field := problem(t, r); r.Status != http.StatusUnprocessableEntity || field != "plate" {
			t.Errorf("plate %q after 30A-123.45: %d %s, want 422 plate (already listed)", plate, r.Status, r.Body)
		}
	}
}
