package events_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/events"
	"berth.dev/berth/internal/outbox"
)

// stuck is a recorder that, while blocked, waits until its context is
// done: on the context itself, or in a statement that never ends by
// itself.
type stuck struct {
	*recorder
	inSQL   bool
	blocked atomic.Bool
	calls   atomic.Int64
}

func (s *stuck) Handle(ctx context.Context, tx pgx.Tx, e events.Event) error {
	if s.blocked.Load() {
		s.calls.Add(1)
		if s.inSQL {
			_, err := tx.Exec(ctx, `SELECT pg_sleep(3600)`)
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	}
	return s.recorder.Handle(ctx, tx, e)
}

// A consumer that never finishes holds up neither the relay nor the other
// consumers: they get every event, the stuck one has all of its events
// parked (none lost), and once it works again the retrier hands them over
// in order; and the relay's transaction, which holds the others' work,
// never fails for it. Without a bound per consumer, the relay pass waits
// for it until the pass's own time runs out, rolls every consumer's work
// back, and starts again with the same batch: nobody gets anything.
func TestStuckConsumerHoldsUpNoOther(t *testing.T) {
	t.Parallel()
	for _, inSQL := range []bool{false, true} {
		name := "waits on its context"
		if inSQL {
			// A statement cut off by its context alone makes pgx close
			// the relay's connection, and the relay's transaction with
			// the other consumers' work would be lost.
			name = "waits in a statement"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "")
			reg := prometheus.NewRegistry()
			d := e.dispatcher(reg)
			// Generous for the consumers that work (a batch takes them
			// milliseconds), however busy the machine.
			d.ConsumerTimeout = 2 * time.Second
			om := outbox.NewMetrics(reg)
			e.workload(t, 12, 12, 2, nil)
			var want int
			if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE type LIKE 'booking.%'`).Scan(&want); err != nil {
				t.Fatal(err)
			}
			slow := &stuck{recorder: newRecorder("stuck"), inSQL: inSQL}
			slow.blocked.Store(true)
			others := newRecorder("recorder")
			tickets := events.Tickets{Clock: e.clock}
			// One consumer before the stuck one and one after it.
			stop := e.runInProcess(t, d, 1, []events.Consumer{others, slow, tickets}, func(r *outbox.Relay) { r.Metrics = om })
			e.waitPublished(t, time.Minute)
			stop()
			// The relay's transaction, which holds the other consumers'
			// work, survived the stuck one (its statement cancelled, not
			// its connection closed): no pass failed and was done again.
			if n := metric(t, reg, "berth_outbox_publish_errors_total", ""); n != 0 {
				t.Errorf("%v relay passes failed", n)
			}
			// Had a working consumer run out of its time too (a very busy
			// machine), its events are parked: the retrier hands them over.
			e.clock.Advance(time.Hour)
			if _, err := (&events.Retrier{D: d, Consumers: []events.Consumer{others, tickets}}).Pass(context.Background()); err != nil {
				t.Fatal(err)
			}
			e.waitDelivered(t, "recorder", 10*time.Second)
			if n := others.handled.Load(); n < int64(want) {
				t.Errorf("the other consumer handled %d events, want all %d", n, want)
			}
			others.check(t)
			if slow.calls.Load() == 0 {
				t.Fatal("the stuck consumer was never called")
			}
			var parked int
			if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM consumer_parked WHERE consumer = 'stuck'`).Scan(&parked); err != nil {
				t.Fatal(err)
			}
			if parked != want {
				t.Errorf("%d events parked for the stuck consumer, want all %d", parked, want)
			}
			if n := metric(t, reg, "berth_consumer_timeouts_total", "stuck"); n == 0 {
				t.Error("no timeout counted for the stuck consumer")
			}
			// It works again: the retrier hands it every event, in order.
			slow.blocked.Store(false)
			retrier := &events.Retrier{D: d, Consumers: []events.Consumer{slow}}
			if n, err := retrier.Pass(context.Background()); err != nil || n != want {
				t.Errorf("retrier handed over %d events (%v), want %d", n, err, want)
			}
			e.waitDelivered(t, "stuck", 10*time.Second)
			slow.check(t)
			e.checkTickets(t)
		})
	}
}
