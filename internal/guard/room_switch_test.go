package guard_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/pg/pgtest"
	"berth.dev/berth/internal/testsvc"
)

// Two real `berth serve` processes share the database and a Redis. Both
// have served holds with the room off; then an admin switches the room on
// through process 0, and as soon as that is answered 40 customers ask for
// 40 seats at once, half through each process: the room is in force in both, so
// nobody is let through without an admission, and admissions afterwards
// follow admitPerSecond (plus the one second's burst an idle room allows).
// Switched off again, nobody is kept waiting by either once that is answered.
func TestWaitingRoomSwitchReachesEveryProcess(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	rdb := testsvc.StartRedis(t) // a Redis of its own: real processes use bare keys
	env := []string{"BERTH_REDIS_URL=" + rdb.URL(), "BERTH_PROTECT=on"}
	procs := []*apptest.Process{apptest.StartProcess(t, dbURL, env...), apptest.StartProcess(t, dbURL, env...)}
	now := time.Now()
	admin := apptest.Token(t, "admin", 1, now)
	flightID := apptest.CreateFlight(t, procs[0].URL, admin, now.Add(72*time.Hour),
		apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 29, "ABCDEF")})
	const customers = 40
	tokens := make([]string, customers+2)
	for i := range tokens {
		tokens[i] = apptest.Token(t, "customer", int64(100+i), now)
	}
	customer := func(p *apptest.Process, i int) apptest.Client { return apptest.Client{Base: p.URL, Token: tokens[i]} }
	hold := func(p *apptest.Process, i int, seat, admission string) apptest.Attempt {
		return apptest.Try(customer(p, i).WithRoomToken(admission).TryHoldSeats(t, flightID, "ECONOMY", seat))
	}
	// Both processes have loaded the room as off and served a hold with it.
	for i, p := range procs {
		customer(p, customers+i).HoldSeats(t, flightID, "ECONOMY", fmt.Sprintf("29%c", 'A'+i))
	}

	const per = 5
	switched := configureRoom(t, procs[0].URL, admin, flightID, true, per)
	seat := func(i int) string { return fmt.Sprintf("%d%c", 10+i/6, 'A'+i%6) }
	rs := apptest.Race(customers, func(i int) apptest.Attempt { return hold(procs[i%2], i, seat(i), "") })
	got := apptest.Tally(rs)
	t.Logf("burst %s after the switch through two processes: %v", time.Since(switched).Round(time.Millisecond), got)
	if got["429 waiting_room"] != customers {
		t.Fatalf("answers = %v, want all %d queued: the room was switched on before", got, customers)
	}

	// Each customer polls its ticket (at either process) and holds with
	// its admission; the admissions may come no faster than the rate,
	// plus one second's worth.
	tickets := make([]string, customers)
	for i, r := range rs {
		tickets[i], _ = queued(t, r)
	}
	var mu sync.Mutex
	admitted := map[int]time.Duration{}
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	for i := range customers {
		wg.Go(func() {
			for k := 0; time.Now().Before(deadline); k++ {
				st := customer(procs[(i+k)%2], i).WaitingRoom(t, tickets[i])
				if st.Admitted {
					mu.Lock()
					admitted[i] = time.Since(switched)
					mu.Unlock()
					if h := hold(procs[(i+k+1)%2], i, seat(i), st.Token); h.Problem != nil {
						t.Errorf("customer %d holding with its admission: %s", i, h)
					}
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(switched)
	allowed := int(float64(per)*elapsed.Seconds()) + per
	t.Logf("%d admitted within %s of the switch at %d/s (at most %d allowed)", len(admitted), elapsed.Round(time.Millisecond), per, allowed)
	if len(admitted) == 0 {
		t.Errorf("nobody was admitted in %s at %d/s", elapsed, per)
	}
	for i, at := range admitted {
		n := 0
		for _, other := range admitted {
			if other <= at {
				n++
			}
		}
		if limit := int(float64(per)*at.Seconds()) + per; n > limit {
			t.Errorf("customer %d admitted %s after the switch as the %dth: more than %d/s plus %d allow", i, at, n, per, per)
		}
	}

	// Switched off: once answered, nobody is kept waiting by either.
	configureRoom(t, procs[1].URL, admin, flightID, false, 0)
	const after = 20
	rs = apptest.Race(after, func(i int) apptest.Attempt {
		return hold(procs[i%2], i, fmt.Sprintf("%d%c", 24+i/6, 'A'+i%6), "")
	})
	if got := apptest.Tally(rs); got["ok"] != after {
		t.Errorf("answers after the room was switched off = %v, want %d held", got, after)
	}
	apptest.MustAudit(t, pgtest.Open(t, dbURL), time.Now())
}

// configureRoom switches flight's waiting room through the berth at base
// and returns when the answer came.
func configureRoom(t *testing.T, base, admin string, flightID int64, on bool, per int) time.Time {
	t.Helper()
	apptest.Client{Base: base, Token: admin}.SetWaitingRoom(t, flightID, on, per)
	return time.Now()
}

// Two berth servers on one database and Redis, both having served holds
// with the rooms off. A room switched on through one is in force in both
// once the switch is answered: a hold sent through the other right after
// the answer, without an admission token, is queued (429 waiting_room),
// never held. Three flights, one after another.
func TestWaitingRoomSwitchIsInForceWhenAnswered(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	redisURL, prefix := apptest.SharedRedis(t)
	a := start(t, dbURL, redisURL, prefix, nil)
	b := start(t, dbURL, redisURL, prefix, nil)
	admin := a.Token("admin", 1)
	for i := range 3 {
		flightID := a.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(10, 11, "ABCDEF")})
		for k, s := range []*apptest.Server{a, b} {
			s.Customer(int64(100+10*i+k)).HoldSeats(t, flightID, "ECONOMY", fmt.Sprintf("10%c", 'A'+k))
		}
		configureRoom(t, a.URL, admin, flightID, true, 5)
		if _, p := b.Customer(int64(200+i)).TryHoldSeats(t, flightID, "ECONOMY", "11A"); !p.Is(http.StatusTooManyRequests, "waiting_room") {
			t.Fatalf("flight %d: a hold through the other server right after the room was switched on: %v, want 429 waiting_room", i, p)
		}
	}
}
