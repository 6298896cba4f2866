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

	"github.com/golang-jwt/jwt/v5"
)

func TestIssueVerify(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tok, err := Issue(secret, 42, Customer, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Verify(secret, tok, now.Add(59*time.Minute))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if c.ID != 42 || c.Role != Customer {
		t.Errorf("caller = %+v, want 42/customer", c)
	}
	if _, exp, err := VerifyUntil(secret, tok, now); err != nil || !exp.Equal(now.Add(time.Hour)) {
		t.Errorf("VerifyUntil: expires %s (%v), want %s", exp, err, now.Add(time.Hour))
	}

	if _, err := Verify(secret, tok, now.Add(61*time.Minute)); !errors.Is(err, ErrInvalid) {
		t.Errorf("expired token: err = %v, want ErrInvalid", err)
	}
	if _, err := Verify([]byte("other"), tok, now); !errors.Is(err, ErrInvalid) {
		t.Errorf("wrong secret: err = %v, want ErrInvalid", err)
	}
	// A token whose payload was edited (role raised to admin) keeps its old
	// signature and must be refused.
	parts := strings.Split(tok, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forged := strings.Replace(string(payload), `"customer"`, `"admin"`, 1)
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(forged))
	if _, err := Verify(secret, strings.Join(parts, "."), now); !errors.Is(err, ErrInvalid) {
		t.Errorf("forged payload: err = %v, want ErrInvalid", err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	sign := func(m jwt.SigningMethod, key any, c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(m, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	exp := now.Add(time.Hour).Unix()
	tests := map[string]string{
		"alg none":        sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "1", "role": "admin", "exp": exp}),
		"HS512":           sign(jwt.SigningMethodHS512, secret, jwt.MapClaims{"sub": "1", "role": "admin", "exp": exp}),
		"no exp":          sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "1", "role": "admin"}),
		"non-numeric sub": sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "bob", "role": "admin", "exp": exp}),
		"zero sub":        sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "0", "role": "admin", "exp": exp}),
		"sub with a zero": sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "01", "role": "admin", "exp": exp}),
		"sub with a sign": sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "+1", "role": "admin", "exp": exp}),
		"sub past 2^53-1": sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "9007199254740992", "role": "admin", "exp": exp}),
		"unknown role":    sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "1", "role": "root", "exp": exp}),
		"garbage":         "not.a.token",
		// Signed and valid but for its size: refused before it is decoded.
		"over MaxTokenLen": sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "1", "role": "admin", "exp": exp, "pad": strings.Repeat("x", MaxTokenLen)}),
		"empty":            "",
	}
	// Tokens signed by hand, under the header Issue writes and under
	// another (the library's path), with what encoding/json or the library
	// would read leniently.
	signRaw := func(header, claims string) string {
		signing := base64.RawURLEncoding.EncodeToString([]byte(header)) + "." + base64.RawURLEncoding.EncodeToString([]byte(claims))
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(signing))
		return signing + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	}
	e := strconv.FormatInt(exp, 10)
	for _, h := range []struct{ name, header string }{
		{"issued header", `{"alg":"HS256","typ":"JWT"}`},
		{"other header", `{"typ":"JWT","alg":"HS256"}`},
	} {
		if _, err := Verify(secret, signRaw(h.header, `{"sub":"1","role":"customer","exp":`+e+`}`), now); err != nil {
			t.Fatalf("%s: a good token refused: %v", h.name, err)
		}
		tests[h.name+", exp a string"] = signRaw(h.header, `{"sub":"1","role":"customer","exp":"`+e+`"}`)
		tests[h.name+", iat a string"] = signRaw(h.header, `{"sub":"1","role":"customer","exp":`+e+`,"iat":"1"}`)
		tests[h.name+", role twice"] = signRaw(h.header, `{"sub":"1","role":"customer","exp":`+e+`,"role":"admin"}`)
		tests[h.name+", Role beside role"] = signRaw(h.header, `{"sub":"1","role":"customer","exp":`+e+`,"Role":"admin"}`)
	}
	tests["alg twice in the header"] = signRaw(`{"alg":"none","alg":"HS256"}`, `{"sub":"1","role":"customer","exp":`+e+`}`)
	tests["Alg beside alg in the header"] = signRaw(`{"alg":"HS256","Alg":"none"}`, `{"sub":"1","role":"customer","exp":`+e+`}`)
	tests["a critical extension"] = signRaw(`{"alg":"HS256","crit":["x"],"x":1}`, `{"sub":"1","role":"customer","exp":`+e+`}`)
	// The last character of a 32-byte signature carries two unused bits:
	// set, the string differs and decodes to the same bytes.
	good, err := Issue(secret, 1, Customer, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, good[len(good)-1])
	tests["unused bits of the signature set"] = good[:len(good)-1] + string(alphabet[last|1])
	for name, tok := range tests {
		if _, err := Verify(secret, tok, now); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

// BenchmarkVerify is the cost of checking a token no cache has seen (in a
// sale every customer's first request pays it): berth's Verify, and the JWT
// library's parser alone on the same token for comparison.
func BenchmarkVerify(b *testing.B) {
	secret := []byte("bench-secret-0123456789abcdef01")
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	tok, err := Issue(secret, 10_000_042, Customer, now, 24*time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct {
		name   string
		verify func() error
	}{
		{"berth", func() error { _, err := Verify(secret, tok, now); return err }},
		{"library", func() error { _, err := verifyLibrary(secret, tok, now); return err }},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := v.verify(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Ids run from 1 to MaxID (2^53 − 1, the largest a JavaScript client reads
// exactly): Issue refuses one past it, and Verify takes MaxID itself.
func TestIDsUpToMaxID(t *testing.T) {
	secret := []byte("test-secret-0123456789abcdef")
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	tok, err := Issue(secret, MaxID, Customer, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := Verify(secret, tok, now); err != nil || c.ID != MaxID {
		t.Errorf("MaxID: %+v %v", c, err)
	}
	if _, err := Issue(secret, MaxID+1, Customer, now, time.Hour); err == nil {
		t.Error("Issue took MaxID + 1")
	}
}
