package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/outbox"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/pg/pgtest"
)

// TestLocalCommitsWakeWithoutNotify: a session of a process that runs its
// own relays (berth.wake_local = on) commits events without a NOTIFY — which
// would cost every listening session a transaction to read — and its
// CommitWaker wakes the relays once the commit succeeded; a commit that
// wrote no events, or rolled back, wakes nothing. Other sessions still
// notify.
func TestLocalCommitsWakeWithoutNotify(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	ctx := context.Background()
	waker := &outbox.CommitWaker{}
	woken := make(chan struct{}, 16)
	waker.Set(func() { woken <- struct{}{} })
	local, err := pg.Open(ctx, url, pg.PoolConfig{MaxConns: 2, Tracer: waker, Params: map[string]string{outbox.WakeLocalParam: "on"}})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	other := pgtest.Open(t, url)
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, "LISTEN "+outbox.Channel); err != nil {
		t.Fatal(err)
	}
	notified := func() bool {
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := listener.WaitForNotification(wctx)
		return err == nil
	}
	ev := outbox.Event{BookingID: 1, Type: outbox.BookingHeld, Data: map[string]int{"bookingId": 1}, Time: epoch}

	// A local commit of an event wakes, without a notification.
	if err := pg.InTx(ctx, local, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, ev) }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("a local commit of an event did not wake the relays")
	}
	if notified() {
		t.Error("a local commit notified")
	}
	// Pipelined, too.
	if err := pg.InTx(ctx, local, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO outbox (booking_id, type, payload, created_at) VALUES (1, 'booking.held', '{}', $1)`, epoch)
		return tx.SendBatch(ctx, b).Close()
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("a local commit of a pipelined event did not wake the relays")
	}
	// A statement sent outside a transaction commits by itself: one that
	// writes events wakes once it succeeded, whether its text shows the
	// insert or says so with WritesMark (a function that inserts them).
	if _, err := local.Exec(ctx, `INSERT INTO outbox (booking_id, type, payload, created_at) VALUES (1, 'booking.held', '{}', $1)`, epoch); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("an insert of an event outside a transaction did not wake the relays")
	}
	if _, err := other.Exec(ctx, `CREATE FUNCTION write_event(p_at timestamptz) RETURNS void LANGUAGE sql
		AS $$ INSERT INTO outbox (booking_id, type, payload, created_at) VALUES (1, 'booking.held', '{}', p_at) $$`); err != nil {
		t.Fatal(err)
	}
	if _, err := local.Exec(ctx, outbox.WritesMark+`SELECT write_event($1)`, epoch); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("a marked call writing events outside a transaction did not wake the relays")
	}
	if _, err := local.Exec(ctx, outbox.WritesMark+`SELECT write_event(NULL)`); err == nil {
		t.Fatal("an event without a time was stored")
	}
	// A batch sent outside a transaction commits by itself, at its end.
	pipelined := func(at any) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`)
		b.Queue(outbox.WritesMark+`SELECT write_event($1)`, at)
		return local.SendBatch(ctx, b).Close()
	}
	if err := pipelined(epoch); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("a batch writing events outside a transaction did not wake the relays")
	}
	if err := pipelined(nil); err == nil {
		t.Fatal("an event without a time was stored")
	}
	// No events, or rolled back, or failed: nothing.
	if err := pg.InTx(ctx, local, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, "SELECT 1"); return err }); err != nil {
		t.Fatal(err)
	}
	tx, err := local.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Write(ctx, tx, ev); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
		t.Error("a commit without events, a rollback or a failed statement or batch woke the relays")
	case <-time.After(200 * time.Millisecond):
	}
	// Another process's session notifies.
	if err := pg.InTx(ctx, other, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, ev) }); err != nil {
		t.Fatal(err)
	}
	if !notified() {
		t.Error("a commit of a session without berth.wake_local did not notify")
	}
}
