package payment_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/audit"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/payment/paytest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}

const price = 1_500_000

// newFlight creates a flight with seats 10A–12C (ECONOMY) at price VND.
func newFlight(t *testing.T, s *apptest.Server) int64 {
	t.Helper()
	return s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: price, Seats: apptest.Seats(10, 12, "ABC")})
}

// hold holds seats for customer and returns the booking id.
func hold(t *testing.T, s *apptest.Server, customer, flightID int64, seats ...string) int64 {
	t.Helper()
	return s.Customer(customer).HoldSeats(t, flightID, "ECONOMY", seats...).BookingID
}

type bookingRow struct {
	Status, CancelReason, RefundStatus string
	Expires                            time.Time
}

func getBooking(t *testing.T, pool *pgxpool.Pool, id int64) bookingRow {
	t.Helper()
	var b bookingRow
	err := pool.QueryRow(context.Background(), `SELECT status, coalesce(cancel_reason, ''), coalesce(refund_status, ''), hold_expires_at
		FROM booking WHERE id = $1`, id).Scan(&b.Status, &b.CancelReason, &b.RefundStatus, &b.Expires)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// count runs a count(*) query.
func count(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func events(t *testing.T, pool *pgxpool.Pool, bookingID int64, typ string) int {
	t.Helper()
	return count(t, pool, `SELECT count(*) FROM outbox WHERE booking_id = $1 AND type = $2`, bookingID, typ)
}

type paymentRow struct {
	Outcome, Reason string
	N               int
}

// paymentOf returns the outcome of the payments recorded for txn.
func paymentOf(t *testing.T, pool *pgxpool.Pool, txn string) paymentRow {
	t.Helper()
	var p paymentRow
	err := pool.QueryRow(context.Background(), `SELECT count(*), coalesce(min(outcome), ''), coalesce(min(reason), '')
		FROM payment WHERE provider_txn_id = $1`, txn).Scan(&p.N, &p.Outcome, &p.Reason)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type seatRow struct {
	Status  string
	Booking int64
}

func seat(t *testing.T, pool *pgxpool.Pool, flightID int64, no string) seatRow {
	t.Helper()
	var s seatRow
	var b *int64
	if err := pool.QueryRow(context.Background(), `SELECT status, booking_id FROM seat WHERE flight_id = $1 AND seat_no = $2`,
		flightID, no).Scan(&s.Status, &b); err != nil {
		t.Fatal(err)
	}
	if b != nil {
		s.Booking = *b
	}
	return s
}

type counters struct{ Sold, Held int }

// fareCounters reads the class's counters, from its buckets where the
// schema splits them (the hot-row work) or else from fare_inventory.
func fareCounters(t *testing.T, pool *pgxpool.Pool, flightID int64) counters {
	t.Helper()
	var split bool
	if err := pool.QueryRow(context.Background(), `SELECT to_regclass('fare_bucket') IS NOT NULL`).Scan(&split); err != nil {
		t.Fatal(err)
	}
	table := "fare_inventory"
	if split {
		table = "fare_bucket"
	}
	var c counters
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(sum(sold), 0), coalesce(sum(held), 0) FROM `+table+`
		WHERE flight_id = $1 AND fare_class = 'ECONOMY'`, flightID).Scan(&c.Sold, &c.Held); err != nil {
		t.Fatal(err)
	}
	return c
}

// settle brings the server to rest: holds past expiry swept, every
// refund.requested handed to the refunds consumer, and the in-process
// gateway's refund webhooks delivered.
func settle(t *testing.T, s *apptest.Server, relay *paytest.Relay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A pass skips bookings another transaction has locked (a consumer or a
	// webhook still at work on them): sweep until no hold is overdue.
	for {
		if _, err := s.App.Sweeper.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		var overdue int
		if err := s.App.Pool.QueryRow(ctx, `SELECT count(*) FROM booking WHERE status = 'HELD' AND hold_expires_at <= $1`,
			s.Clock.Now()).Scan(&overdue); err != nil {
			t.Fatal(err)
		}
		if overdue == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d holds still overdue after sweeping for 2 minutes", overdue)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if relay == nil {
		relay = &paytest.Relay{Pool: s.App.Pool, Consumer: s.App.Refunds}
	}
	drainRefunds(ctx, t, relay)
	if s.App.PaySim != nil {
		if err := s.App.PaySim.Idle(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// drainRefunds hands every refund event to the refunds consumer until
// none fails. A gateway that refuses some calls can refuse all of one
// refund's attempts in a round, or trip the client's circuit; the running
// process tries again a little later, and so does this, for up to 30 s
// (longer than the circuit stays open).
func drainRefunds(ctx context.Context, t *testing.T, relay *paytest.Relay) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, errs := relay.Drain(ctx)
		if len(errs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("refunds still failing after 30 s: %v", errs)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("refunds: %v (%v)", errs, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func mustAudit(t *testing.T, s *apptest.Server) {
	t.Helper()
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}

func path(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func itoa(n int64) string { return fmt.Sprint(n) }

// auditResults runs the audit and returns each invariant's verdict.
func auditResults(t *testing.T, s *apptest.Server) map[string]bool {
	t.Helper()
	results, err := audit.Run(context.Background(), s.App.Pool, audit.Options{Now: s.Clock.Now(), SweepInterval: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, r := range results {
		out[r.ID] = r.OK
	}
	return out
}

// start runs berth for a test with a small database pool (the test server
// is shared with other packages' tests), adjusted by cfg when given.
func start(t *testing.T, cfg func(*config.Config)) *apptest.Server {
	t.Helper()
	return apptest.Start(t, apptest.Options{Config: func(c *config.Config) {
		c.DBMaxConns = 8
		if cfg != nil {
			cfg(c)
		}
	}})
}

// startFlight starts berth with a flight of newFlight's and returns the
// server, its database pool and the flight's id.
func startFlight(t *testing.T) (*apptest.Server, *pgxpool.Pool, int64) {
	t.Helper()
	s := start(t, nil)
	return s, s.App.Pool, newFlight(t, s)
}
