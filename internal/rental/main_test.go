package rental_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/payment/paytest"
	"berth.dev/berth/internal/pg"
)

func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}

// ict is the offset the tests' customers write their times in.
var ict = time.FixedZone("", 7*3600)

// day is a day in December 2026, after apptest.Epoch; at(day, 20, 0) is
// 20:00 that day in ict.
func at(day, hour, minute int) time.Time {
	return time.Date(2026, 12, day, hour, minute, 0, 0, ict)
}

var seq atomic.Int64

// car is a test car: what a host listed.
type car struct {
	ID      int64
	Host    int64
	Deposit int64
	Daily   int64
}

// listCar lists a car in city with turnaround through the host API, as host.
func listCar(t testing.TB, base, hostToken string, host int64, city, turnaround string) car {
	t.Helper()
	n := seq.Add(1)
	c := car{Host: host, Deposit: 2_000_000, Daily: 800_000}
	c.ID = apptest.Client{Base: base, Token: hostToken}.CreateCar(t, apptest.Car{Plate: fmt.Sprintf("29T-%03d.%02d", n/100%1000, n%100),
		Model: "Toyota Vios", City: city, DailyPrice: c.Daily, Deposit: c.Deposit, Currency: "VND", Turnaround: turnaround}).ID
	return c
}

// listCar lists a car for host 500 on s.
func (e *env) listCar(city, turnaround string) car {
	e.t.Helper()
	return listCar(e.t, e.s.URL, e.s.Token("host", 500), 500, city, turnaround)
}

// env is an in-process berth with a fake clock.
type env struct {
	t *testing.T
	s *apptest.Server
}

func start(t *testing.T) *env {
	t.Helper()
	return &env{t: t, s: apptest.Start(t, apptest.Options{})}
}

func (e *env) pool() *pgxpool.Pool { return e.s.App.Pool }

// book books carID for customer over [from, to) and fails the test unless it
// gets 201; it returns the booking id.
func (e *env) book(customer int64, carID int64, from, to time.Time) int64 {
	e.t.Helper()
	return e.s.Customer(customer).HoldCar(e.t, carID, from, to).BookingID
}

// confirm confirms a held booking as the payment path would, at the fake
// clock's time: the charge is recorded with the confirmation.
func (e *env) confirm(id int64) {
	e.t.Helper()
	err := pg.InTx(context.Background(), e.pool(), func(tx pgx.Tx) error {
		return paytest.Confirm(context.Background(), tx, e.s.App.Life, id)
	})
	if err != nil {
		e.t.Fatalf("confirm booking %d: %v", id, err)
	}
}

func (e *env) status(id int64) string {
	e.t.Helper()
	var s string
	if err := e.pool().QueryRow(context.Background(), `SELECT status FROM booking WHERE id = $1`, id).Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// state is what a refused request must leave unchanged.
type state struct{ bookings, live, events, cars int }

func snapshot(t testing.TB, pool *pgxpool.Pool) state {
	t.Helper()
	var s state
	if err := pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM booking), (SELECT count(*) FROM booking WHERE status IN ('HELD', 'CONFIRMED', 'ON_TRIP')),
			(SELECT count(*) FROM outbox WHERE type NOT LIKE 'refund.%'), (SELECT count(*) FROM car)`).Scan(&s.bookings, &s.live, &s.events, &s.cars); err != nil {
		t.Fatal(err)
	}
	return s
}

// problem decodes an error answer's code and field.
func problem(t testing.TB, r *apptest.Response) (status int, code, field string) {
	t.Helper()
	var p struct {
		Code  string `json:"code"`
		Field string `json:"field"`
	}
	r.JSON(t, &p)
	return r.Status, p.Code, p.Field
}
