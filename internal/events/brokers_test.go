package events_test

import (
	"context"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/events"
)

// TestKafkaOneOfThreeBrokersStops runs two relays and the consumers
// against three brokers and stops one of them in the middle of the writes
// — the recorder group's coordinator, so the group must find another, and
// the leader of some partitions, which move to the other two: every
// booking's events still arrive once each, in order, and nothing is left
// unpublished.
//
// BERTH_TEST_KFAKE_READD=1 also brings the broker back on its port. With
// the kfake version in go.mod that run does not finish: produces time out
// from then on and consumers see partitions reset to offset 0. Whether
// that is kfake's re-added node or a real recovery problem of the
// producer is not settled yet (see docs/operations.md, BerthOutboxPublishFailing).
func TestKafkaOneOfThreeBrokersStops(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	kc, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(8, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	c := &cluster{Cluster: kc}
	brokers := kc.ListenAddrs()
	if len(brokers) != 3 {
		t.Fatalf("%d brokers, want 3", len(brokers))
	}
	reg := prometheus.NewRegistry()
	d := e.dispatcher(reg)
	rec := newRecorder("recorder")
	stop := e.runKafka(t, c, d, 2, []events.Consumer{events.Tickets{Clock: e.clock}, rec}, nil)
	defer stop()

	victim := kc.CoordinatorFor("berth-recorder")
	var victimPort int
	for _, addr := range brokers {
		// kfake numbers brokers in the order of ListenAddrs.
		if _, p, err := net.SplitHostPort(addr); err == nil && addr == brokers[victim] {
			victimPort, _ = strconv.Atoi(p)
		}
	}
	if victimPort == 0 {
		t.Fatalf("no port for broker %d among %v", victim, brokers)
	}

	const bookings, changes = 200, 10
	written := make(chan []int64, 1)
	go func() { written <- e.workload(t, bookings, changes, 8, nil) }()
	// Stop the broker once events flow, keep it down a while, bring it back.
	apptest.Eventually(t, time.Minute, "the recorder sees the first events", func() bool { return rec.handled.Load() > 200 })
	if err := kc.RemoveNode(victim); err != nil {
		t.Fatal(err)
	}
	t.Logf("broker %d (the recorder group's coordinator) stopped after %d events", victim, rec.handled.Load())
	time.Sleep(2 * time.Second)
	if os.Getenv("BERTH_TEST_KFAKE_READD") != "" {
		if _, _, err := kc.AddNode(victim, victimPort); err != nil {
			t.Fatalf("bring broker %d back on port %d: %v", victim, victimPort, err)
		}
		t.Logf("broker %d back after %d events", victim, rec.handled.Load())
	}
	ids := <-written
	e.waitDelivered(t, "recorder", 3*time.Minute)
	stop()

	rec.check(t)
	e.checkTickets(t)
	if n, want := rec.handled.Load(), int64(len(ids)*changes); n != want {
		t.Errorf("recorder processed %d events, want each of the %d once", n, want)
	}
	var unpublished int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&unpublished); err != nil || unpublished != 0 {
		t.Errorf("%d events unpublished (%v)", unpublished, err)
	}
}
