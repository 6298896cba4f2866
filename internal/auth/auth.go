// Package auth issues and verifies berth's bearer tokens: HS256 JWTs whose
// subject is the caller's numeric id and whose role claim is customer, host
// or admin.
package auth

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"berth.dev/berth/internal/booking"
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
func Verify(secret []byte, token string, now time.Time) (booking.Caller, error) {
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	if err != nil {
		return booking.Caller{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	id, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || id <= 0 {
		return booking.Caller{}, fmt.Errorf("%w: subject %q is not a numeric id", ErrInvalid, c.Subject)
	}
	if !ValidRole(c.Role) {
		return booking.Caller{}, fmt.Errorf("%w: unknown role %q", ErrInvalid, c.Role)
	}
	return booking.Caller{ID: id, Role: c.Role}, nil
}
