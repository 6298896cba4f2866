package flight_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/testsvc"
)

// TestReadReplica runs berth on a real streaming replica of its primary
// (pg_basebackup -R): seat maps read from the replica while it is current;
// when it lags past BERTH_READ_MAX_LAG or is down they read from the
// primary and /readyz says "degraded" (still 200); and holds are decided by
// the primary whatever the replica shows.
func TestReadReplica(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary := testsvc.StartPostgres(t, testsvc.PostgresOptions{})
	url := primary.CreateDatabase(t, "berth")
	pool, err := pg.Open(ctx, url, pg.PoolConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	replica := primary.StartReplica(t)
	const maxLag = 4 * time.Second
	s := apptest.Start(t, apptest.Options{DatabaseURL: url, Config: func(c *config.Config) {
		c.DatabaseReadURL = replica.URL("berth")
		c.ReadMaxLag = maxLag
	}})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(1, 1, "ABC")})

	waitFor := func(what string, ok func() bool) {
		t.Helper()
		apptest.Eventually(t, 60*time.Second, "never: "+what, ok)
	}
	seat := func(no string) string {
		t.Helper()
		r := s.Do(apptest.Request{Method: http.MethodGet, Path: fmt.Sprintf("/flights/%d/seats", flightID)})
		if r.Status != http.StatusOK {
			// A replica within its allowed lag may not have the flight yet.
			return fmt.Sprintf("answer %d", r.Status)
		}
		var m struct {
			Seats []struct{ SeatNo, Status string }
		}
		r.JSON(t, &m)
		for _, x := range m.Seats {
			if x.SeatNo == no {
				return x.Status
			}
		}
		// A replica that has not replayed the flight's seats yet shows
		// none; the callers wait for, or compare with, a real status.
		return "MISSING"
	}
	readyz := func() (int, string) {
		r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/readyz"})
		var ready struct {
			DatabaseRead string `json:"databaseRead"`
			// A problem+json answer carries the checks in "checks".
			Checks struct {
				DatabaseRead string `json:"databaseRead"`
			} `json:"checks"`
		}
		r.JSON(t, &ready)
		if ready.DatabaseRead == "" {
			return r.Status, ready.Checks.DatabaseRead
		}
		return r.Status, ready.DatabaseRead
	}
	replicaExec := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, replica.URL("berth"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Customer 1 holds 1B; the replica catches up and reads go to it.
	b1 := s.Customer(1).HoldSeats(t, flightID, "ECONOMY", "1B")
	waitFor("reads go to the replica", func() bool { st, state := readyz(); return st == 200 && state == "ok" })
	waitFor("the replica shows 1B held", func() bool { return seat("1B") == "HELD" })

	// The replica stops replaying: from now on it shows the past.
	replicaExec(`SELECT pg_wal_replay_pause()`)
	paused := time.Now()
	s.Customer(2).HoldSeats(t, flightID, "ECONOMY", "1A")
	s.Customer(1).Cancel(t, b1.BookingID)
	// Within the allowed lag, the seat map is the replica's: stale.
	if a, b := seat("1A"), seat("1B"); time.Since(paused) < maxLag/2 && (a != "AVAILABLE" || b != "HELD") {
		t.Fatalf("seat map within the allowed lag: 1A %s 1B %s; want the replica's AVAILABLE and HELD (read from the primary?)", a, b)
	}
	// Holds ask the primary, never the replica: 1A, which the replica
	// shows free, is refused; 1B, which it shows held, is granted.
	three := s.Customer(3)
	if _, p := three.TryHoldSeats(t, flightID, "ECONOMY", "1A"); !p.Is(http.StatusConflict, "seat_unavailable") {
		t.Errorf("hold of 1A (taken on the primary, free on the replica): %v, want 409 seat_unavailable", p)
	}
	if _, p := three.TryHoldSeats(t, flightID, "ECONOMY", "1B"); p != nil {
		t.Errorf("hold of 1B (free on the primary, held on the replica): %s, want a hold", p)
	}

	// Past the allowed lag, reads go to the primary; berth stays ready.
	waitFor("reads leave the lagging replica", func() bool { _, state := readyz(); return state == "degraded" })
	if st, _ := readyz(); st != http.StatusOK {
		t.Errorf("/readyz answered %d with a lagging replica; want 200 degraded", st)
	}
	if a, b := seat("1A"), seat("1B"); a != "HELD" || b != "HELD" {
		t.Errorf("seat map from the primary: 1A %s 1B %s, want HELD HELD", a, b)
	}

	// Replay resumes: reads go back to the replica.
	replicaExec(`SELECT pg_wal_replay_resume()`)
	waitFor("reads return to the replica", func() bool { _, state := readyz(); return state == "ok" })

	// The replica goes down: reads go to the primary, seat maps still work.
	replica.Stop(t, "immediate")
	waitFor("reads leave the stopped replica", func() bool { _, state := readyz(); return state == "degraded" })
	if a := seat("1A"); a != "HELD" {
		t.Errorf("seat map with the replica down: 1A %s, want HELD", a)
	}
	if st, _ := readyz(); st != http.StatusOK {
		t.Errorf("/readyz answered %d with the replica down; want 200 degraded", st)
	}
}
