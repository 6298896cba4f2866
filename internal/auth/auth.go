// Package auth issues and verifies berth's bearer tokens: HS256 JWTs whose
// subject is the caller's numeric id and whose role claim is customer, host
// or admin.
package auth

import (
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
	if sub <= 0 {
		return "", fmt.Errorf("subject must be a positive id, got %d", sub)
	}
	c := claims{Role: role, RegisteredClaims: jwt.RegisteredClaims{
		Subject:   strconv.FormatInt(sub, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

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
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return nil, fmt.Errorf("%w: signature: %w", jwt.ErrTokenMalformed, err)
	}
	if err := jwt.SigningMethodHS256.Verify(token[:len(head)+1+len(payload)], mac, secret); err != nil {
		return nil, fmt.Errorf("%w: %w", jwt.ErrTokenSignatureInvalid, err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: claims: %w", jwt.ErrTokenMalformed, err)
	}
	c := new(claims)
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("%w: claims: %w", jwt.ErrTokenMalformed, err)
	}
	v := jwt.NewValidator(jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return now }))
	if err := v.Validate(c); err != nil {
		return nil, fmt.Errorf("%w: %w", jwt.ErrTokenInvalidClaims, err)
	}
	return c, nil
}

// verifyLibrary verifies any token through the JWT library's parser.
func verifyLibrary(secret []byte, token string, now time.Time) (*claims, error) {
	c := new(claims)
	_, err := jwt.ParseWithClaims(token, c, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// caller checks the claims berth adds to a valid token.
func caller(c *claims) (Caller, error) {
	// Only the canonical form ("42", not "042" or "+42"): one caller, one
	// spelling of their id.
	id, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != c.Subject {
		return Caller{}, fmt.Errorf("%w: subject %q is not a numeric id", ErrInvalid, c.Subject)
	}
	if !ValidRole(c.Role) {
		return Caller{}, fmt.Errorf("%w: unknown role %q", ErrInvalid, c.Role)
	}
	return Caller{ID: id, Role: c.Role}, nil
}
