package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"berth.dev/berth/internal/fault"
)

// FuzzDecode feeds the strict body decoder arbitrary bytes for each of the
// bodies berth takes: it never panics, refuses with 400 invalid_request
// only, and what it accepts is valid UTF-8 JSON without a key twice or in
// the wrong case, which encoding/json reads to the same value.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"flightId": 1, "fareClass": "ECONOMY", "seats": ["12A", "12B"]}`,
		`{"flightId": 1, "fareClass": "ECONOMY", "quantity": 2}`,
		`{"carId": 3, "from": "2026-12-10T08:00:00+07:00", "to": "2026-12-13T08:00:00+07:00"}`,
		`{"flightId":999,"FlightId":1}`,
		`{"flightId":1,"flightId":2}`, `{"flightId":1,"\u0066lightId":2}`, `{"\u0046lightId":1}`,
		`{"plate": "30A-123.45", "model": "Vi\u0000os", "city": "HN", "dailyPrice": 1, "deposit": 0, "currency": "VND", "turnaround": "2h"}`,
		`{"code": "VN1", "fares": [{"fareClass": "ECONOMY", "Price": 1, "price": 2}]}`,
		`{} {}`, `[]`, `null`, ``, `{"seats": [[[[[[[[]]]]]]]]}`, "{\"fareClass\": \"\xff\"}", `{"a":{"b":{"c":1,"c":2}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, dst := range []func() any{
			func() any { return &createBookingRequest{} },
			func() any { return &CreateCarRequest{} },
			func() any { return &CreateFlightRequest{} },
		} {
			got := dst()
			err := decodeJSON(body, got)
			if err != nil {
				var fe *fault.Error
				if !errors.As(err, &fe) || fe.Code != fault.InvalidRequest {
					t.Fatalf("%q: %v, want invalid_request", body, err)
				}
				continue
			}
			if !utf8.Valid(body) || !json.Valid(body) {
				t.Fatalf("accepted %q, which is not UTF-8 JSON", body)
			}
			if key, twice := keyTwice(json.NewDecoder(bytes.NewReader(body))); twice {
				t.Fatalf("accepted %q, which has the key %q twice in one object", body, key)
			}
			want := dst()
			if err := json.Unmarshal(body, want); err != nil {
				t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
			}
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(want)
			if string(a) != string(b) {
				t.Fatalf("%q decoded as %s, encoding/json reads %s", body, a, b)
			}
		}
	})
}

// keyTwice reports a key that appears twice in one object of the JSON
// value dec reads, walking its tokens (the way the strict decoder once did
// it, slower, and so an independent check of it).
func keyTwice(dec *json.Decoder) (string, bool) {
	tok, err := dec.Token()
	if err != nil {
		return "", false
	}
	switch tok {
	case json.Delim('['):
		for dec.More() {
			if key, twice := keyTwice(dec); twice {
				return key, true
			}
		}
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return "", false
			}
			key, _ := tok.(string)
			if seen[key] {
				return key, true
			}
			seen[key] = true
			if key, twice := keyTwice(dec); twice {
				return key, true
			}
		}
	default:
		return "", false
	}
	_, _ = dec.Token() // the closing delimiter
	return "", false
}

// FuzzParseTime: timestamps are RFC 3339 with an offset, or refused with
// 422 naming the field; an accepted one reads back to the same instant.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-01-25T08:00:00+07:00", "2026-01-25T08:00:00Z", "2026-01-25T08:00:00", "2026-01-25T08:00:00.123456789-23:59",
		"", "0000-01-01T00:00:00+00:00", "9999-12-31T23:59:59+14:00", "2026-02-30T00:00:00Z", "2026-01-25T24:00:00Z", "2026-01-25 08:00:00+07:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, err := parseTime("from", s)
		if err != nil {
			var fe *fault.Error
			if !errors.As(err, &fe) || fe.Code != fault.ValidationFailed || fe.Field != "from" {
				t.Fatalf("%q: %v, want validation_failed naming from", s, err)
			}
			return
		}
		if !strings.ContainsAny(s[len(s)-6:], "Zz+-") {
			t.Fatalf("accepted %q without an offset", s)
		}
		back, err := time.Parse(time.RFC3339Nano, tm.Format(time.RFC3339Nano))
		if err != nil || !back.Equal(tm) {
			t.Fatalf("%q → %v does not read back (%v, %v)", s, tm, back, err)
		}
	})
}

// RFC 3339's "T" and "Z" may be written in lower case (its section 5.6);
// nothing else is read case-blind.
func TestParseTimeTakesLowerCaseTAndZ(t *testing.T) {
	want := time.Date(2027, 8, 1, 9, 0, 0, 0, time.UTC)
	for _, s := range []string{"2027-08-01t09:00:00z", "2027-08-01T09:00:00z", "2027-08-01t09:00:00Z", "2027-08-01t16:00:00+07:00"} {
		if got, err := parseTime("from", s); err != nil || !got.Equal(want) {
			t.Errorf("parseTime(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"2027-08-01x09:00:00Z", "2027-08-01t09:00:00", "2027-08-01t09:00:00y", "2027-08-01T09:00:00,5Z", "2027-08-01T09:00:00Zz"} {
		_, err := parseTime("from", s)
		if err == nil {
			t.Errorf("parseTime(%q) accepted", s)
		} else if !strings.Contains(err.Error(), strconv.Quote(s)) {
			t.Errorf("parseTime(%q): %v, want the value as given quoted", s, err)
		}
	}
}

// BenchmarkDecodeHold is the strict decoding of a seat hold's body, which
// every hold pays, accepted or refused.
func BenchmarkDecodeHold(b *testing.B) {
	body := []byte(`{"flightId": 817, "fareClass": "ECONOMY", "seats": ["12A", "12B"]}`)
	b.ReportAllocs()
	for b.Loop() {
		var req createBookingRequest
		if err := decodeJSON(body, &req); err != nil {
			b.Fatal(err)
		}
	}
}
