package pg

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Refused reports whether err is PostgreSQL declining a connection: it is
// unreachable, has too many clients, or is starting up or shutting down.
func Refused(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	// too_many_connections, cannot_connect_now
	return errors.As(err, &pe) && (pe.Code == "53300" || pe.Code == "57P03")
}

// Lost reports whether err is a connection lost under a statement: the
// network failed on an open connection, or PostgreSQL ended it
// (admin_shutdown, crash_shutdown, a connection exception). When pgx knows
// nothing reached the server (pgconn.SafeToRetry) the statement had no
// effect; otherwise it may have committed, and only a retry that can find
// what it made (under an Idempotency-Key) may try again.
func Lost(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the caller's own deadline, or its caller leaving
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "57P01" || pe.Code == "57P02" || strings.HasPrefix(pe.Code, "08")
	}
	var ne net.Error
	return errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.As(err, &ne)
}

// Away reports whether err is the database refusing or losing a
// connection (Refused or Lost): any other statement would meet the same
// until it is back, so retrying at once only adds load.
func Away(err error) bool { return Refused(err) || Lost(err) }
