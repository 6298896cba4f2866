package money

import "testing"

func TestKnown(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{"VND": true, "USD": true, "EUR": true, "JPY": true, "XYZ": false, "vnd": false, "": false, "XTS": false, "XAU": false} {
		if Known(code) != want {
			t.Errorf("Known(%q) = %v, want %v", code, !want, want)
		}
	}
	for code, want := range map[string]int{"VND": 0, "USD": 2, "KWD": 3, "UYW": 4, "XYZ": 2} {
		if got := MinorDigits(code); got != want {
			t.Errorf("MinorDigits(%q) = %d, want %d", code, got, want)
		}
	}
}
