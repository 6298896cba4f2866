// Package auth issues and verifies berth's bearer tokens: HS256 JWTs whose
// subject is the caller's numeric id and whose role claim is customer, host
// or admin.
package auth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Roles.
const (
	Customer = "customer"
	Host     = "host"
	Admin    = "admin"
)

// ValidRole reports whether r is a role berth knows.
func ValidRole(r string) bool { return r == Customer || r == Host || r == Admin }

type claims struct {
	Role string `json:"role"`
	jwt.RegisteredClaims
}

// Issue returns a token for subject sub with role, valid for ttl from now.
func Issue(secret []byte, sub int64, role string, now time.Time, ttl time.Duration) (string, error) {
	if !ValidRole(role) {
		return "", fmt.Errorf("unknown role %q", role)
	}
	if sub <= 0 || sub > MaxID {
		return "", fmt.Errorf("subject must be an id from 1 to %d, got %d", MaxID, sub)
	}
	c := claims{Role: role, RegisteredClaims: jwt.RegisteredClaims{
		Subject:   strconv.FormatInt(sub, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

// MaxID is the largest caller id: 2^53 − 1. Ids are JSON numbers
// (customerId in every booking), and a client in JavaScript reads a number
// exactly only up to it: a larger one would turn into another id there.
const MaxID = 1<<53 - 1

// ErrInvalid is returned for any token that must not be trusted.
var ErrInvalid = errors.New("invalid token")

// Verify checks token's signature, algorithm and expiry against now and
// returns who it speaks for.
//
// A token with the header Issue writes ({"alg":"HS256","typ":"JWT"},
// byte for byte) takes a short path: the signature is checked first, with
// no header to parse, so a forged or garbled token costs one HMAC and
// nothing else; then the claims are decoded and validated as the JWT
// library would. Any other header goes through the library's parser,
// which refuses every algorithm but HS256. Both paths accept exactly the
// same tokens (FuzzVerifyPathsAgree).
func Verify(secret []byte, token string, now time.Time) (Caller, error) {
	who, _, err := VerifyUntil(secret, token, now)
	return who, err
}

// VerifyUntil is Verify that also returns when the token expires (every
// token it accepts has an expiry), read from the claims Verify decodes.
func VerifyUntil(secret []byte, token string, now time.Time) (Caller, time.Time, error) {
	if len(token) > MaxTokenLen {
		return Caller{}, time.Time{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxTokenLen)
	}
	c, err := verifyIssued(secret, token, now)
	if errors.Is(err, errOtherHeader) {
		c, err = verifyLibrary(secret, token, now)
	}
	if err != nil {
		return Caller{}, time.Time{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	who, err := caller(c)
	if err != nil {
		return Caller{}, time.Time{}, err
	}
	return who, c.ExpiresAt.Time, nil
}

// MaxTokenLen is the longest token Verify reads. The tokens berth issues
// are under 200 bytes, an identity provider's rarely over 1 KiB; a longer
// one is refused before anything decodes it, so that a flood of huge forged
// tokens costs no more than one of short ones.
const MaxTokenLen = 4096

// issuedHeader is the first segment of every token Issue writes:
// base64url of {"alg":"HS256","typ":"JWT"}.
const issuedHeader = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"

// errOtherHeader sends a token whose header is not issuedHeader to the
// library's parser.
var errOtherHeader = errors.New("not the header berth issues")

// verifyIssued verifies a token whose header is issuedHeader, with the
// library's own signature check and claims validator.
func verifyIssued(secret []byte, token string, now time.Time) (*claims, error) {
	head, rest, ok := strings.Cut(token, ".")
	if !ok || head != issuedHeader {
		return nil, errOtherHeader
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(sig, ".") {
		return nil, jwt.ErrTokenMalformed
	}
	mac, err := strictB64.DecodeString(sig)
	if err != nil {
		return nil, fmt.Errorf("%w: signature: %w", jwt.ErrTokenMalformed, err)
	}
	if err := jwt.SigningMethodHS256.Verify(token[:len(head)+1+len(payload)], mac, secret); err != nil {
		return nil, fmt.Errorf("%w: %w", jwt.ErrTokenSignatureInvalid, err)
	}
	raw, err := strictB64.DecodeString(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: claims: %w", jwt.ErrTokenMalformed, err)
	}
	c := new(claims)
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("%w: claims: %w", jwt.ErrTokenMalformed, err)
	}
	if err := checkClaims(raw); err != nil {
		return nil, fmt.Errorf("%w: claims: %w", jwt.ErrTokenMalformed, err)
	}
	v := jwt.NewValidator(jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return now }))
	if err := v.Validate(c); err != nil {
		return nil, fmt.Errorf("%w: %w", jwt.ErrTokenInvalidClaims, err)
	}
	return c, nil
}

// verifyLibrary verifies any token through the JWT library's parser, then
// holds its header and claims to the rules verifyIssued keeps.
func verifyLibrary(secret []byte, token string, now time.Time) (*claims, error) {
	c := new(claims)
	t, err := jwt.ParseWithClaims(token, c, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithStrictDecoding(),
	)
	if err != nil {
		return nil, err
	}
	// No extension of JWS is understood here, so a header that says one
	// must be understood is refused (RFC 7515, 4.1.11).
	if _, ok := t.Header["crit"]; ok {
		return nil, fmt.Errorf("%w: a critical header extension berth does not know", jwt.ErrTokenUnverifiable)
	}
	// The header is held to the claims' rules too: {"alg":"none","alg":"HS256"}
	// is one token to this parser and another to a reader keeping the first.
	segments := strings.Split(token, ".") // the library decoded both
	for i, what := range []string{"header", "claims"} {
		raw, err := strictB64.DecodeString(segments[i])
		if err == nil {
			err = checkClaims(raw)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", jwt.ErrTokenMalformed, what, err)
		}
	}
	return c, nil
}

// strictB64 refuses the encodings of a segment whose unused last bits are
// not zero, so that one token has one spelling: a token string altered in
// its last character, still verifying, would slip past anything keyed on
// the string (a cache, a deny list, a log search).
var strictB64 = base64.RawURLEncoding.Strict()

// checkClaims refuses, in b (claims or a header that decoded, so valid
// JSON), a key twice, or two keys that differ only in case (encoding/json keeps the
// last, so {"role":"customer",…,"Role":"admin"} would be an admin), and a
// time claim that is not a JSON number (RFC 7519's NumericDate; the
// library also takes a numeric string). It reads the bytes once, without
// allocating for each token: every customer's first request pays it.
func checkClaims(b []byte) error {
	i := space(b, 0)
	if i == len(b) || b[i] != '{' {
		return nil // not an object: decoding it into claims fails
	}
	var seen [16][]byte
	keys := seen[:0]
	for i = space(b, i+1); b[i] != '}'; i = space(b, i) {
		if b[i] == ',' {
			i = space(b, i+1)
		}
		end := value(b, i)
		key := b[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			_ = json.Unmarshal(b[i:end], &k) // a valid JSON string
			key = []byte(k)
		}
		for _, k := range keys {
			if bytes.EqualFold(k, key) {
				return fmt.Errorf("the member %q appears twice", key)
			}
		}
		keys = append(keys, key)
		i = space(b, space(b, end)+1) // past the colon
		c := b[i]
		if (c < '0' || c > '9') && c != '-' && (bytes.EqualFold(key, []byte("exp")) ||
			bytes.EqualFold(key, []byte("nbf")) || bytes.EqualFold(key, []byte("iat"))) {
			return fmt.Errorf("the member %q must be a number", key)
		}
		i = value(b, i)
	}
	return nil
}

// value returns the end of the valid JSON value that starts at b[i], a
// member's value inside an object.
func value(b []byte, i int) int {
	depth := 0
	for ; ; i++ {
		switch b[i] {
		case '"':
			for i++; b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the object around a number or literal
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
}

func space(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// caller checks the claims berth adds to a valid token.
func caller(c *claims) (Caller, error) {
	// Only the canonical form ("42", not "042" or "+42"): one caller, one
	// spelling of their id.
	id, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || id <= 0 || id > MaxID || strconv.FormatInt(id, 10) != c.Subject {
		return Caller{}, fmt.Errorf("%w: subject %q is not a numeric id from 1 to %d", ErrInvalid, c.Subject, MaxID)
	}
	if !ValidRole(c.Role) {
		return Caller{}, fmt.Errorf("%w: unknown role %q", ErrInvalid, c.Role)
	}
	return Caller{ID: id, Role: c.Role}, nil
}
