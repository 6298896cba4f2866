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
		{"\u200b", false},         // a zero-width space
		{"\ufeffX", false},        // a byte order mark
		{"A\u2028B", false},       // a line separator
		{"Vios\u00ad", false},     // a soft hyphen
		{"\u200fVios", false},     // a right-to-left mark
		{"Vios\U000E0041", false}, // a tag
		{"می\u200cخواهم", true},   // a Persian word with its joiner
		{"👨\u200d👩\u200d👧", true}, // an emoji sequence
	} {
		if err := Check(c.in, 100); (err == nil) != c.ok {
			t.Errorf("Check(%q) = %v, want ok %v", c.in, err, c.ok)
		}
	}
}

func TestVisible(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{"Vios": true, "": false, "   ": false, "\u200c": false, "\u200d \u3000": false, " x ": true, "🚗": true} {
		if Visible(in) != want {
			t.Errorf("Visible(%q) = %v, want %v", in, !want, want)
		}
	}
}
