package guard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/guard"
	"berth.dev/berth/internal/pg/pgtest"
)

// A connection lost under a request (PostgreSQL ended it, or the network
// failed on it) is 503 overloaded with Retry-After, never a 500; the
// request's own deadline and errors that are not the database's are left
// as they are.
func TestDatabaseLostIsOverload(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	admin := pgtest.Open(t, url)
	ctx := context.Background()

	// PostgreSQL ends the connection (pg_terminate_backend: 57P01).
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, conn.PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	_, terminated := conn.Exec(ctx, `SELECT 1`)
	// The connection is then closed: the next query is never sent.
	_, closed := conn.Exec(ctx, `SELECT 1`)
	_ = conn.Close(ctx)

	lost := map[string]error{
		"terminated":     terminated,
		"closed":         closed,
		"crash_shutdown": fmt.Errorf("hold: %w", &pgconn.PgError{Code: "57P02"}),
		// pgx's "conn closed" that it does not call safe to retry (the
		// fault suite saw it as a 500 while PostgreSQL was stopped).
		"conn closed, not safe to retry": fmt.Errorf("hold: %w", pgconn.ErrConnClosed),
		"unexpected EOF":                 fmt.Errorf("hold: %w", io.ErrUnexpectedEOF),
		"connection reset":               fmt.Errorf("hold: %w", syscall.ECONNRESET),
	}
	for name, err := range lost {
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		var fe *fault.Error
		if got := guard.AsOverload(ctx, err); !errors.As(got, &fe) || fe.Code != fault.Overloaded || fe.RetryAfter <= 0 {
			t.Errorf("%s (%v): %v, want overloaded with Retry-After", name, err, got)
		}
	}
	for name, err := range map[string]error{
		"cancelled": fmt.Errorf("hold: %w", context.Canceled),
		"other":     errors.New("something else"),
		"unique":    &pgconn.PgError{Code: "23505"},
	} {
		if got := guard.AsOverload(ctx, err); fault.CodeOf(got) != "" {
			t.Errorf("%s: %v, want it left as it is", name, got)
		}
	}
}
