// Package text checks the free text berth stores and logs: a car's model,
// a gateway's transaction id. PostgreSQL refuses NUL bytes (SQLSTATE
// 22021, which used to surface as a 500), control characters break logs
// and pages, and bidirectional overrides make "evil.exe" read as
// "exe.live"; lengths are counted in characters, as a person counts them.
package text

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Check returns why s is not acceptable as one line of text of at most
// max characters (nil if it is): not valid UTF-8, a NUL or other control
// character, a bidirectional override or isolate, a line or paragraph
// separator, another invisible formatting character (a zero-width space,
// a byte order mark, a soft hyphen, a direction mark, a tag: text that
// reads as blank or as another text), or too long.
func Check(s string, max int) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("must be valid UTF-8")
	}
	n := 0
	for _, r := range s {
		n++
		switch {
		case r == 0:
			return fmt.Errorf("must not contain NUL")
		case unicode.IsControl(r):
			return fmt.Errorf("must not contain control characters (U+%04X)", r)
		case Bidi(r):
			return fmt.Errorf("must not contain bidirectional overrides (U+%04X)", r)
		case r == '\u2028' || r == '\u2029':
			return fmt.Errorf("must be one line (U+%04X)", r)
		case unicode.Is(unicode.Cf, r) && r != zwnj && r != zwj:
			return fmt.Errorf("must not contain invisible formatting characters (U+%04X)", r)
		case r == utf8.RuneError:
			return fmt.Errorf("must be valid UTF-8")
		}
	}
	if n > max {
		return fmt.Errorf("must be at most %d characters, not %d", max, n)
	}
	return nil
}

// The zero-width non-joiner and joiner: invisible, but they shape the
// letters around them in Persian, the Indic scripts and emoji sequences.
const zwnj, zwj = '\u200C', '\u200D'

// Visible reports whether s has a character that shows: a letter, digit,
// mark, punctuation or symbol (so not only spaces, joiners or nothing).
func Visible(s string) bool {
	for _, r := range s {
		if unicode.IsGraphic(r) && !unicode.IsSpace(r) {
			return true
		}
	}
	return false
}

// Bidi reports whether r is a bidirectional embedding, override or
// isolate (U+202A–U+202E, U+2066–U+2069): invisible characters that
// reorder what follows them on screen.
func Bidi(r rune) bool {
	return (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069)
}

// Len is the length of s in characters.
func Len(s string) int { return utf8.RuneCountInString(s) }
