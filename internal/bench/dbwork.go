package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// dbWork is what berth made PostgreSQL do up to a moment: the mode
// database's committed and rolled-back transactions (pg_stat_database,
// every session of the database counted) and berth's round trips
// (berth_db_round_trips_total, summed over its processes).
type dbWork struct {
	commits, rollbacks int64
	trips              float64
	ok                 bool
}

// measureDBWork reads dbWork after waiting settle: a PostgreSQL session
// reports its statistics at most once a second, and an idle one up to 10 s
// late, so the counters only settle that long after the load stopped.
func measureDBWork(ctx context.Context, pool *pgxpool.Pool, c *client, srv *server, settle time.Duration) dbWork {
	sleepUntil(ctx, time.Now().Add(settle))
	var w dbWork
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.QueryRow(qctx, `SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()`).
		Scan(&w.commits, &w.rollbacks); err != nil {
		return w
	}
	for _, u := range srv.urls {
		trips, err := scrapeCounter(qctx, c, u+"/metrics", "berth_db_round_trips_total")
		if err != nil {
			return w
		}
		w.trips += trips
	}
	w.ok = true
	return w
}

// setDBWork records on r the database work between from and to per good
// answer (a committed hold).
func (r *ClosedResult) setDBWork(from, to dbWork, settle time.Duration) {
	if !from.ok || !to.ok || r.Good == 0 {
		return
	}
	n := float64(r.Good)
	r.DB = &DBWork{
		CommitsPerHold:    float64(to.commits-from.commits) / n,
		RollbacksPerHold:  float64(to.rollbacks-from.rollbacks) / n,
		RoundTripsPerHold: (to.trips - from.trips) / n,
		SettleSeconds:     settle.Seconds(),
	}
}

// scrapeCounter reads one unlabelled counter from a Prometheus text page.
func scrapeCounter(ctx context.Context, c *client, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s", url, name)
}
