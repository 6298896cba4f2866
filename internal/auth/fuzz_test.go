package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
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

// FuzzVerifyPathsAgree signs arbitrary claims under the header Issue
// writes, so that they take Verify's short path past the signature, and
// checks that the JWT library's parser decides every one the same way:
// the same caller, or a refusal from both. A tampered signature is
// refused by both.
func FuzzVerifyPathsAgree(f *testing.F) {
	secret := []byte("fuzz-secret-0123456789abcdef")
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	exp, past := strconv.FormatInt(now.Add(time.Hour).Unix(), 10), strconv.FormatInt(now.Add(-time.Hour).Unix(), 10)
	atNow := strconv.FormatInt(now.Unix(), 10)
	for _, claims := range []string{
		`{"role":"customer","sub":"42","exp":` + exp + `}`,
		`{"role":"customer","sub":"42","exp":` + past + `}`,
		`{"role":"customer","sub":"42","exp":` + atNow + `}`,
		`{"role":"customer","sub":"42","exp":` + exp + `,"nbf":` + exp + `}`,
		`{"role":"customer","sub":"42","exp":` + exp + `,"nbf":` + past + `,"iat":` + exp + `}`,
		`{"role":"admin","sub":"42","exp":"` + exp + `"}`,
		`{"role":"admin","sub":"42","EXP":` + exp + `,"Role":"host"}`,
		`{"role":"admin","sub":"42","exp":` + past + `,"exp":` + exp + `}`,
		`{"role":"host","sub":"42","exp":` + exp + `,"aud":["a",1]}`,
		`{"role":"host","sub":"42","exp":` + exp + `,"aud":"a"}`,
		`{"role":"host","sub":"42","exp":` + exp + `} trailing`,
		`{"role":"host","sub":"-1","exp":` + exp + `}`,
		`{"role":"host","sub":42,"exp":` + exp + `}`,
		`{"role":"host","sub":"42","exp":1e30}`,
		`{"role":"host","sub":"42","exp":` + exp + `.9}`,
		`null`, `[]`, `{}`, ``, `{"role":"customer","sub":"42","exp":null}`,
	} {
		f.Add(claims, false)
		f.Add(claims, true)
	}
	f.Fuzz(func(t *testing.T, claims string, tamper bool) {
		signing := issuedHeader + "." + base64.RawURLEncoding.EncodeToString([]byte(claims))
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(signing))
		sum := mac.Sum(nil)
		if tamper {
			sum[0] ^= 1
		}
		token := signing + "." + base64.RawURLEncoding.EncodeToString(sum)
		short, errShort := verifyIssued(secret, token, now)
		lib, errLib := verifyLibrary(secret, token, now)
		if (errShort == nil) != (errLib == nil) {
			t.Fatalf("claims %q (tampered %v): short path err %v, library err %v", claims, tamper, errShort, errLib)
		}
		if errShort != nil {
			if _, err := Verify(secret, token, now); !errors.Is(err, ErrInvalid) {
				t.Fatalf("claims %q: Verify err %v, want ErrInvalid", claims, err)
			}
			return
		}
		if tamper {
			t.Fatalf("claims %q: a tampered signature verified", claims)
		}
		a, errA := caller(short)
		b, errB := caller(lib)
		if a != b || (errA == nil) != (errB == nil) {
			t.Fatalf("claims %q: short path %+v %v, library %+v %v", claims, a, errA, b, errB)
		}
	})
}
