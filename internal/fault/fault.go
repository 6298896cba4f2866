// Package fault is berth's one error vocabulary: a stable, machine-readable
// code for every error a caller may act on, and a plain wrapped error for
// everything else (which the HTTP layer logs and answers with "internal
// error"). Domain packages return *Error values; httpapi maps each code to a
// status once, in one table.
package fault

import (
	"errors"
	"fmt"
	"time"
)

// Code is a stable error code of the public API (see docs/api.md).
type Code string

// The codes of docs/api.md. Their HTTP statuses live in httpapi.
const (
	InvalidRequest       Code = "invalid_request"
	BodyTooLarge         Code = "body_too_large"
	ValidationFailed     Code = "validation_failed"
	Unauthenticated      Code = "unauthenticated"
	Forbidden            Code = "forbidden"
	NotFound             Code = "not_found"
	SeatUnavailable      Code = "seat_unavailable"
	SoldOut              Code = "sold_out"
	CarUnavailable       Code = "car_unavailable"
	InvalidState         Code = "invalid_state"
	HoldExpired          Code = "hold_expired"
	IdempotencyKeyInUse  Code = "idempotency_key_in_use"
	IdempotencyKeyReused Code = "idempotency_key_reused"
	RateLimited          Code = "rate_limited"
	WaitingRoom          Code = "waiting_room"
	Overloaded           Code = "overloaded"
)

// Error is an error the caller can act on. Detail is safe to show to users:
// it never contains internal data.
type Error struct {
	Code   Code
	Detail string
	// Field names the offending input for ValidationFailed ("seats[2]").
	Field string
	// RetryAfter is sent as a Retry-After header when non-zero.
	RetryAfter time.Duration
	// Extra holds additional members of the problem document (the waiting
	// room's ticket and position).
	Extra map[string]any
	// FreeAt is, for SoldOut, when the first units held now come back on
	// sale (the earliest live hold's expiry), which no answer that the
	// class is sold out may outlive; zero when nothing held will expire.
	// Never shown to users.
	FreeAt time.Time
	// Err is the cause, kept for logs and errors.Is; never shown to users.
	Err error
}

func (e *Error) Error() string {
	msg := string(e.Code)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an error with code and a user-facing detail.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// Invalid returns a ValidationFailed error about field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: ValidationFailed, Field: field, Detail: field + ": " + fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of the first *Error in err's chain, or "" when err
// is not one (an internal error).
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Is reports whether err carries code.
func Is(err error, code Code) bool { return err != nil && CodeOf(err) == code }
