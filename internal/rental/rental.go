// Package rental rents cars out for periods of time. A car's calendar is its
// live bookings in the shared booking table; PostgreSQL keeps them from
// overlapping with the exclusion constraint booking_car_no_overlap, over
// each booking's period extended by the car's turnaround buffer (computed by
// a trigger, never here). The package owns the SQL of cars: listing,
// search, calendar and holds. Everything after the hold (payment, pickup,
// return, cancellation, expiry) is the shared booking.Lifecycle's, with
// Inventory as the car kind's part of it.
package rental

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/cache"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/coalesce"
)

// Service lists, finds and holds cars.
type Service struct {
	pool      *pgxpool.Pool
	clock     clock.Clock
	life      *booking.Lifecycle
	holdTTL   time.Duration
	holdLimit booking.HoldLimit
	coalescer *coalesce.Coalescer[int64, HoldRequest, *booking.Booking] // nil: a batch of one per hold

	calendars *cache.Cache[*cityCalendar] // by city
	cities    *cache.Cache[[]City]
}

// Config tunes a Service.
type Config struct {
	HoldTTL time.Duration // how long a hold lasts (BERTH_CAR_HOLD_TTL)
	// HoldLimit is the per-customer hold limit (BERTH_HOLD_LIMIT; zero:
	// none), shared with flight holds.
	HoldLimit booking.HoldLimit
	SearchTTL time.Duration // how stale a search may be (30–60 s)
	// Queue (BERTH_PROTECT) puts concurrent holds of one car in this
	// process together, one batch at a time (see Service.Hold).
	Queue bool
	// Slots bounds the batches under way at once (nil: no bound), shared
	// with flight holds: one per connection holds may use.
	Slots    coalesce.Slots
	Log      *slog.Logger
	Registry prometheus.Registerer
}

// NewService returns a car service on pool. life expires stale holds that
// stand in a new hold's way; it must know Inventory for booking.KindCar.
func NewService(pool *pgxpool.Pool, c clock.Clock, life *booking.Lifecycle, cfg Config) *Service {
	if cfg.SearchTTL == 0 {
		cfg.SearchTTL = 30 * time.Second
	}
	s := &Service{
		pool:      pool,
		clock:     c,
		life:      life,
		holdTTL:   cfg.HoldTTL,
		holdLimit: cfg.HoldLimit,
		cities:    cache.New[[]City](time.Minute, 1),
	}
	// A city's calendar is never used older than the search TTL, and is
	// reloaded in the background once it is a second old (sooner only if
	// the search TTL is shorter; later for a city whose load is slow).
	s.calendars = cache.NewRefreshing[*cityCalendar](cfg.SearchTTL, maxCities,
		reloadAfter(min(time.Second, cfg.SearchTTL), cfg.SearchTTL))
	if cfg.Queue {
		s.coalescer = coalesce.New(coalesce.Config[int64, HoldRequest, *booking.Booking]{
			Many: s.holdMany,
			Busy: coalesce.Overloaded[int64]("car"),
			// One batch of a car at a time: the next waits for the car's
			// row lock anyway, and is decided better once the first has
			// committed.
			MaxBatch: 64, Flushes: 1, Slots: cfg.Slots, QueueWait: maxQueueWait,
			Metric: "berth_car_hold_batch", What: "Car holds", Registry: cfg.Registry, Log: cfg.Log,
		})
	}
	return s
}

// maxCities bounds the cities whose calendars a Service keeps.
const maxCities = 1000

// Inventory is the booking.Inventory of cars. A car booking holds nothing
// beyond its own row: the exclusion constraint counts only live bookings,
// so the status change that the lifecycle makes is what occupies or frees
// the calendar.
type Inventory struct{}

// Sell has nothing to do: a HELD booking already occupies its period, and
// CONFIRMED keeps it.
func (Inventory) Sell(context.Context, pgx.Tx, *booking.Booking) error { return nil }

// Release has nothing to do: leaving the live statuses takes the booking out
// of booking_car_no_overlap.
func (Inventory) Release(context.Context, pgx.Tx, *booking.Booking, booking.Status) error {
	return nil
}
