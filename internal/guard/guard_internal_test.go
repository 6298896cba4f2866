package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"berth.dev/berth/internal/base"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg/pgtest"
)

func testRoom() *Room {
	return newRoom(&Redis{}, nil, clock.NewFake(time.Unix(1_800_000_000, 0)), []byte("secret-secret-secret"),
		time.Hour, 2*time.Minute, true, nil, newMetrics(prometheus.NewRegistry()))
}

// Tickets and tokens verify only as signed, as the kind asked for, and
// before they expire.
func TestPassSignVerify(t *testing.T) {
	t.Parallel()
	rm := testRoom()
	now := rm.clock.Now()
	p := pass{kind: 't', flight: 7, customer: 42, seq: 3, expires: now.Add(time.Minute)}
	s := rm.sign(p)
	got, err := rm.verify(s, 't', now)
	if err != nil || got.kind != p.kind || got.flight != p.flight || got.customer != p.customer || got.seq != p.seq ||
		!got.expires.Equal(p.expires) {
		t.Fatalf("verify(sign(p)) = %+v, %v; want %+v", got, err, p)
	}
	other := newRoom(&Redis{}, nil, rm.clock, []byte("another-secret-here!"), time.Hour, time.Minute, true, nil,
		newMetrics(prometheus.NewRegistry()))
	bad := map[string]string{
		"as a token":      "",
		"expired":         s,
		"another key":     other.sign(p),
		"customer edited": strings.Replace(s, ".42.", ".43.", 1),
		"no signature":    s[:strings.LastIndexByte(s, '.')],
		"empty":           "",
		"garbage":         "t1.2.3",
	}
	for name, v := range bad {
		kind, at := byte('t'), now
		switch name {
		case "as a token":
			v, kind = s, 'a'
		case "expired":
			at = p.expires
		}
		if _, err := rm.verify(v, kind, at); !errors.Is(err, errPass) {
			t.Errorf("%s: err = %v, want errPass", name, err)
		}
	}
}

// A deadline berth set becomes 503 overloaded; a client that went away or
// another error stays what it was.
func TestAsOverload(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("acquire: %w", context.DeadlineExceeded)
	var fe *fault.Error
	if got := AsOverload(context.Background(), err); !errors.As(got, &fe) || fe.Code != fault.Overloaded {
		t.Errorf("deadline: %v, want overloaded", got)
	} else if fe.RetryAfter == 0 {
		t.Error("overloaded without Retry-After")
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if got := AsOverload(gone, err); fault.CodeOf(got) != "" {
		t.Errorf("client gone: %v, want the error unchanged", got)
	}
	plain := errors.New("boom")
	if got := AsOverload(context.Background(), plain); got != plain { //nolint:errorlint // the very same error
		t.Errorf("other error: %v", got)
	}
	for name, err := range map[string]error{
		"too many clients": fmt.Errorf("acquire: %w", &pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}),
		"starting up":      &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"},
		"unreachable":      fmt.Errorf("acquire: %w", &pgconn.ConnectError{}),
	} {
		if got := AsOverload(context.Background(), err); !errors.As(got, &fe) || fe.Code != fault.Overloaded || fe.RetryAfter == 0 {
			t.Errorf("%s: %v, want overloaded with Retry-After", name, got)
		}
	}
	if constraint := (&pgconn.PgError{Code: "23505"}); AsOverload(context.Background(), constraint) != error(constraint) { //nolint:errorlint // the very same error
		t.Error("a constraint violation became overloaded")
	}
	coded := fault.New(fault.SoldOut, "x")
	if got := AsOverload(context.Background(), coded); got != coded { //nolint:errorlint // the very same error
		t.Errorf("coded error changed: %v", got)
	}
}

// A lane lets n in, lets a bounded number wait, and turns the rest away.
func TestLane(t *testing.T) {
	t.Parallel()
	var inflight, shed atomic.Int64
	l := &lane{name: LaneRead, slots: make(chan struct{}, 2), maxWait: 1,
		inflight: func(d float64) { inflight.Add(int64(d)) }, shed: func() { shed.Add(1) }}
	ctx := context.Background()
	leave1, err1 := l.enter(ctx, time.Second)
	leave2, err2 := l.enter(ctx, time.Second)
	if err1 != nil || err2 != nil || inflight.Load() != 2 {
		t.Fatalf("two enter: %v %v, inflight %v", err1, err2, inflight.Load())
	}
	if _, err := l.enter(ctx, time.Millisecond); fault.CodeOf(err) != fault.Overloaded || shed.Load() != 1 {
		t.Fatalf("third with a full lane: %v (shed %d), want overloaded", err, shed.Load())
	}
	done := make(chan error)
	go func() {
		leave, err := l.enter(ctx, time.Minute)
		if err == nil {
			leave()
		}
		done <- err
	}()
	// Wait until the goroutine waits, then one more finds the queue full.
	for l.waiting.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := l.enter(ctx, time.Minute); fault.CodeOf(err) != fault.Overloaded {
		t.Errorf("with the queue full: %v, want overloaded at once", err)
	}
	leave1()
	leave1() // leaving twice frees one slot only
	if err := <-done; err != nil {
		t.Errorf("the waiter: %v", err)
	}
	leave2()
	if inflight.Load() != 0 || len(l.slots) != 0 {
		t.Errorf("after leaving: inflight %v, %d slots taken", inflight.Load(), len(l.slots))
	}
}

// The listener serves at most n connections at once.
func TestLimitListener(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := LimitListener(inner, 1, 0, nil)
	defer func() { _ = ln.Close() }()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	c1, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c1.Close() }()
	s1 := <-accepted
	c2, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c2.Close() }()
	select {
	case <-accepted:
		t.Fatal("a second connection was accepted while the first is open")
	case <-time.After(100 * time.Millisecond):
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if s2 := <-accepted; s2 == nil {
		t.Fatal("the second connection was not accepted after the first closed")
	} else {
		_ = s2.Close()
	}
}

// A hold of another kind (a car) passes only the lane: its answer, a
// refusal or the database's hold limit included, is the hold's own, and a
// 429 from the database is counted as the hold limit's.
func TestHoldOtherKind(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	rdb := openTestRedis(t, RedisOptions{})
	reg := prometheus.NewRegistry()
	g := New(base.Archetype{Log: log, Clock: clock.NewFake(time.Unix(1_800_000_000, 0)), Registry: reg},
		Config{On: true, Lanes: map[Lane]int{LaneHold: 1}, ShedWait: 150 * time.Millisecond}, rdb, nil)
	limited := fault.New(fault.RateLimited, "at most 3 holds per 15m0s")
	for i, want := range []error{nil, fault.New(fault.CarUnavailable, "taken"), limited, nil} {
		if err := g.Hold(ctx, Intent{Customer: 5}, func(context.Context) error { return want }); err != want { //nolint:errorlint // the very same error
			t.Fatalf("hold %d: %v, want %v", i+1, err, want)
		}
	}
	var m dto.Metric
	if err := g.m.turnedAway.WithLabelValues("hold_limit").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Errorf("holds counted as turned away by the hold limit: %v (%v), want 1", m.GetCounter().GetValue(), err)
	}
}

// Hold gives back everything its layers took when the hold returns an
// error or panics: the seat's gate key and the hold lane's slot. Then a
// hold of the same seat passes, and only a real hold keeps its key.
func TestHoldGivesBackWhenTheHoldFailsOrPanics(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	rdb := openTestRedis(t, RedisOptions{})
	// Every hold passes the gate (QuietHolds < 0), so that its keys are set.
	g := New(base.Archetype{Log: log, Clock: clock.NewFake(time.Unix(1_800_000_000, 0)), Registry: prometheus.NewRegistry()},
		Config{On: true, QuietHolds: -1, Lanes: map[Lane]int{LaneHold: 1}, ShedWait: 150 * time.Millisecond}, rdb, pgtest.NewPool(t))
	seat := func(customer int64, s string) Intent {
		return Intent{Customer: customer, FlightID: 9, FareClass: "ECONOMY", Seats: []string{s}, Units: 1}
	}

	refused := fault.New(fault.SeatUnavailable, "the database says no")
	if err := g.Hold(ctx, seat(7, "1A"), func(context.Context) error { return refused }); err != refused { //nolint:errorlint // the very same error
		t.Fatalf("a refused hold: %v, want its own error", err)
	}
	panicked := func() (p any) {
		defer func() { p = recover() }()
		_ = g.Hold(ctx, seat(7, "1A"), func(context.Context) error { panic("handler bug") })
		return nil
	}()
	if panicked != "handler bug" {
		t.Fatalf("a panicking hold: recovered %v, want the panic to go on", panicked)
	}
	if err := g.Hold(ctx, seat(7, "1A"), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("the same seat after a refusal and a panic: %v, want it held (gate key and lane slot given back)", err)
	}
	// What a real hold took is kept: the seat's gate key.
	if err := g.Hold(ctx, seat(8, "1A"), func(context.Context) error { return nil }); fault.CodeOf(err) != fault.SeatUnavailable {
		t.Errorf("the held seat for another customer: %v, want seat_unavailable from the gate", err)
	}
	if n := g.holding.Load(); n != 0 {
		t.Errorf("%d holds counted in flight after all finished, want 0", n)
	}
}

// New takes its shed wait from BERTH_SHED_WAIT's setting and has no
// default of its own: zero is refused.
func TestNewRefusesZeroShedWait(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "ShedWait") {
			t.Errorf("New with a zero ShedWait: %v, want a panic naming ShedWait", r)
		}
	}()
	New(base.Test(clock.NewFake(time.Unix(1_800_000_000, 0))), Config{}, nil, nil)
}

// ClientNet keys an IPv4 client by its address and an IPv6 one by its /64.
func TestClientNet(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"203.0.113.7": "203.0.113.7", "::ffff:203.0.113.7": "203.0.113.7",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64", "2001:db8:1:2::9%eth0": "2001:db8:1:2::/64", "::1": "::/64",
	} {
		if got := ClientNet(netip.MustParseAddr(in)); got != want {
			t.Errorf("ClientNet(%s) = %s, want %s", in, got, want)
		}
	}
}

// One client address holds at most perAddr connections: one beyond is
// closed at once, and accepted again once one of its others closes; an
// exempt address (a trusted proxy) has no such bound.
func TestLimitListenerPerAddress(t *testing.T) {
	t.Parallel()
	for _, exempt := range []bool{false, true} {
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var ex []netip.Prefix
		if exempt {
			ex = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		}
		ln := LimitListener(inner, 10, 2, ex)
		t.Cleanup(func() { _ = ln.Close() })
		accepted := make(chan net.Conn, 10)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
		dial := func() net.Conn {
			c, err := net.Dial("tcp", inner.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
		// closedByServer reports whether the server closed c at once.
		closedByServer := func(c net.Conn) bool {
			_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			_, err := c.Read(make([]byte, 1))
			return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
		}
		dial()
		dial()
		s1, s2 := <-accepted, <-accepted
		third := dial()
		if got := closedByServer(third); got == exempt {
			t.Errorf("exempt=%v: the third connection of one address closed at once: %v", exempt, got)
		}
		if exempt {
			continue
		}
		_ = s1.Close()
		fourth := dial()
		if closedByServer(fourth) {
			t.Error("a connection after one of the address's closed was refused")
		}
		_ = s2.Close()
	}
}
