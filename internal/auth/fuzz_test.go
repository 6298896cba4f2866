package auth

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

// FuzzVerify feeds the token verifier arbitrary strings: it never panics,
// and whatever it accepts names a positive id and a known role, and was
// signed with the secret (a token signed with another key never passes).
func FuzzVerify(f *testing.F) {
	secret := []byte("fuzz-secret-0123456789abcdef")
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	good, err := Issue(secret, 42, Customer, now, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	other, _ := Issue([]byte("another-secret-0123456789abcd"), 42, Admin, now, time.Hour)
	expired, _ := Issue(secret, 42, Customer, now.Add(-2*time.Hour), time.Hour)
	head, _, _ := strings.Cut(good, ".")
	_, rest, _ := strings.Cut(good, ".")
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + strings.Split(rest, ".")[0] + "."
	for _, s := range []string{good, other, expired, none, "", ".", "..", "a.b.c", head + "..", good + "x", strings.ToUpper(good),
		base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS512","typ":"JWT"}`)) + "." + rest} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		c, err := Verify(secret, token, now)
		if err != nil {
			return
		}
		if c.ID <= 0 || !ValidRole(c.Role) {
			t.Fatalf("accepted %q as %+v", token, c)
		}
		if _, err := Verify([]byte("a-different-secret-entirely-00"), token, now); err == nil {
			t.Fatalf("%q verifies under two secrets", token)
		}
	})
}
