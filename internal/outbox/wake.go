package outbox

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// WakeLocalParam is the session setting with which a process that runs
// relays tells the outbox trigger not to NOTIFY for its commits: it wakes
// its relays itself (CommitWaker), and every notification would cost each
// listening session a transaction to read it.
const WakeLocalParam = "berth.wake_local"

// WritesMark begins a statement that writes outbox events without saying
// so in its own text (a call of a database function that inserts them,
// such as hold_flight), so that a CommitWaker sees it.
const WritesMark = "/* writes outbox events */ "

// CommitWaker is a pool tracer that calls the wake function set with Set
// after each transaction that inserted outbox events commits on the pool:
// at its COMMIT, or, for a statement sent outside a transaction (which
// commits by itself), when the statement succeeded.
type CommitWaker struct {
	wake  atomic.Pointer[func()]
	wrote sync.Map // *pgx.Conn → struct{}: the open transaction wrote events
}

// Set makes wake the function called after such commits (it must not
// block).
func (w *CommitWaker) Set(wake func()) { w.wake.Store(&wake) }

// writes reports whether sql (lower case) writes outbox events.
func writes(sql string) bool {
	return strings.Contains(sql, "insert into outbox") || strings.HasPrefix(sql, WritesMark)
}

// saw notes an outbox insert in sql (lower case) of conn's open transaction.
func (w *CommitWaker) saw(conn *pgx.Conn, sql string) {
	if writes(sql) {
		w.wrote.Store(conn, struct{}{})
	}
}

// TraceQueryStart notes outbox inserts and forgets them at a new
// transaction.
func (w *CommitWaker) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	switch sql := strings.ToLower(strings.TrimSpace(d.SQL)); {
	case strings.HasPrefix(sql, "begin"), sql == "rollback":
		w.wrote.Delete(conn)
	case sql == "commit":
		if _, ok := w.wrote.LoadAndDelete(conn); ok {
			return context.WithValue(ctx, commitKey{}, true)
		}
	case conn.PgConn().TxStatus() == 'I':
		// No transaction open: the statement commits by itself.
		if writes(sql) {
			return context.WithValue(ctx, commitKey{}, true)
		}
	default:
		w.saw(conn, sql)
	}
	return ctx
}

type commitKey struct{}

// TraceQueryEnd wakes after a commit of events that succeeded (a COMMIT,
// or a statement that committed by itself).
func (w *CommitWaker) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if ok, _ := ctx.Value(commitKey{}).(bool); ok && d.Err == nil {
		w.fire()
	}
}

// fire calls the wake function, if one is set.
func (w *CommitWaker) fire() {
	if f := w.wake.Load(); f != nil {
		(*f)()
	}
}

type batchKey struct{}

// TraceBatchStart notes a batch sent outside a transaction: it commits by
// itself, at its end (an implicit transaction).
func (w *CommitWaker) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	if conn.PgConn().TxStatus() == 'I' {
		return context.WithValue(ctx, batchKey{}, new(atomic.Bool))
	}
	return ctx
}

// TraceBatchQuery notes outbox inserts sent in a pipeline: of the batch
// when it commits by itself, else of the open transaction.
func (w *CommitWaker) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	sql := strings.ToLower(d.SQL)
	if wrote, ok := ctx.Value(batchKey{}).(*atomic.Bool); ok {
		if writes(sql) {
			wrote.Store(true)
		}
		return
	}
	w.saw(conn, sql)
}

// TraceBatchEnd wakes after a batch that committed by itself, having
// written events, succeeded.
func (w *CommitWaker) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	if wrote, ok := ctx.Value(batchKey{}).(*atomic.Bool); ok && wrote.Load() && d.Err == nil {
		w.fire()
	}
}
