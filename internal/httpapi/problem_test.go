package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"berth.dev/berth/internal/fault"
)

// A problem is the same document whether it has extra members (encoded
// from a map) or not (from the struct): every member of RFC 9457 berth
// uses, detail included, and field only when there is one.
func TestProblemDocument(t *testing.T) {
	t.Parallel()
	s := &Server{}
	r := httptest.NewRequest(http.MethodPost, "/bookings", nil)
	for _, c := range []struct {
		name string
		err  *fault.Error
		want map[string]any
	}{
		{"plain", fault.New(fault.SoldOut, "sold out"), map[string]any{
			"type": problemBase + "sold_out", "title": "Conflict", "status": 409.0, "detail": "sold out", "code": "sold_out"}},
		{"empty detail, a field", &fault.Error{Code: fault.InvalidRequest, Field: "seats"}, map[string]any{
			"type": problemBase + "invalid_request", "title": "Bad Request", "status": 400.0, "detail": "", "code": "invalid_request", "field": "seats"}},
		{"extra members", &fault.Error{Code: fault.SoldOut, Detail: "sold out", Extra: map[string]any{"waitlist": "/w"}}, map[string]any{
			"type": problemBase + "sold_out", "title": "Conflict", "status": 409.0, "detail": "sold out", "code": "sold_out", "waitlist": "/w"}},
	} {
		w := httptest.NewRecorder()
		s.writeError(w, r, c.err)
		var got map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type %q", c.name, ct)
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %s = %v, want %v", c.name, k, got[k], v)
			}
		}
	}
}

// BenchmarkWriteSoldOut is the answer to a hold of a sold-out class, the
// commonest refusal of a sale.
func BenchmarkWriteSoldOut(b *testing.B) {
	s := &Server{}
	r := httptest.NewRequest(http.MethodPost, "/bookings", nil)
	err := fault.New(fault.SoldOut, "ECONOMY of flight 817 has no 2 seats left")
	b.ReportAllocs()
	for b.Loop() {
		s.writeError(httptest.NewRecorder(), r, err)
	}
}
