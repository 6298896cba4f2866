package apptest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/audit"
	"berth.dev/berth/internal/booking"
)

// Race starts n goroutines, releases them at the same moment (the seed
// document's CountDownLatch), and collects what each returned.
func Race[T any](n int, f func(i int) T) []T {
	out := make([]T, n)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			out[i] = f(i)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	return out
}

// Answers counts responses by status and, for errors, problem code:
// {"201": 1, "409 seat_unavailable": 199}.
func Answers(rs []*Response) map[string]int {
	m := map[string]int{}
	for _, r := range rs {
		key := strconv.Itoa(r.Status)
		if r.Status >= 400 {
			key += " " + r.Code()
		}
		m[key]++
	}
	return m
}

// MustAudit fails t, listing the violations, when any invariant of
// internal/audit does not hold on pool at now.
func MustAudit(t testing.TB, pool *pgxpool.Pool, now time.Time) {
	t.Helper()
	results, err := audit.Run(context.Background(), pool, audit.Options{Now: now, SweepInterval: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if audit.Failed(results) {
		t.Errorf("audit failed:\n%s", audit.Format(results))
	}
}

// Attempt is one typed answer of a Race: the booking, or the problem that
// refused it.
type Attempt struct {
	View    booking.View
	Problem *Problem
}

// Try makes an Attempt of a Try… method's answer.
func Try(v booking.View, p *Problem) Attempt { return Attempt{View: v, Problem: p} }

// Code is the problem code of a refused attempt, "" of a success.
func (a Attempt) Code() string {
	if a.Problem == nil {
		return ""
	}
	return a.Problem.Code
}

// String shows a as a test failure does: the booking, or the problem.
func (a Attempt) String() string {
	if a.Problem != nil {
		return a.Problem.String()
	}
	return fmt.Sprintf("booking %d %s", a.View.BookingID, a.View.Status)
}

// Tally counts attempts like Answers counts responses: "ok" for each
// success, "<status> <code>" for each problem: {"ok": 1, "409
// seat_unavailable": 199}.
func Tally(as []Attempt) map[string]int {
	m := map[string]int{}
	for _, a := range as {
		key := "ok"
		if a.Problem != nil {
			key = strconv.Itoa(a.Problem.Status) + " " + a.Problem.Code
		}
		m[key]++
	}
	return m
}
