package text

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"Toyota Vios", true},
		{"VinFast VF8 — Hà Nội", true},
		{strings.Repeat("🚗", 100), true}, // 100 characters, 400 bytes
		{strings.Repeat("🚗", 101), false},
		{"Vi\x00os", false},
		{"Vi\tos", false},
		{"line\nbreak", false},
		{"\x7f", false},
		{"\u0085", false},
		{"abc\u202Egnp.exe", false},
		{"\u2066x\u2069", false},
		{"bad \xff utf8", false},
		{"", true},
	} {
		if err := Check(c.in, 100); (err == nil) != c.ok {
			t.Errorf("Check(%q) = %v, want ok %v", c.in, err, c.ok)
		}
	}
}
