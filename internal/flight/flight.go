// Package flight sells seats on flights: a counted quota per fare class
// (capacity plus a controlled overbooking limit) and one row per seat. It
// owns the SQL of flights, fares and seats: search, seat maps, holds, and
// the selling and releasing that the booking lifecycle asks for.
package flight

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/cache"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/coalesce"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
	"berth.dev/berth/internal/policy"
)

// Flight is one flight with its fare classes.
type Flight struct {
	ID          int64
	Code        string
	From, To    string
	DepartureAt time.Time // in the origin's time zone
	ArrivalAt   time.Time // in the destination's time zone
	Fares       []Fare
}

// Fare is one fare class of a flight and its counters.
type Fare struct {
	Class         string
	Price         int64
	Currency      string
	Capacity      int
	OverbookLimit int
	Sold          int // the sum over the class's buckets
	// Held is the sum over the class's buckets as it reads at the moment
	// of the read: less the units of holds that have run out but that the
	// sweeper has not recorded yet, which read EXPIRED (booking.AsOf).
	// Their units go back to the class when the sweeper records them.
	Held       int
	Buckets    int // counter rows the quota is split over
	RefundRule policy.Rule
	// Departed: the flight had departed at the moment of the read, and
	// nothing more is sold (hold_flight refuses it).
	Departed bool
}

// Available is how many more units the class may sell: capacity plus the
// overbooking limit, less what is sold and held; none once the flight has
// departed.
func (f Fare) Available() int {
	if f.Departed {
		return 0
	}
	return max(0, f.Capacity+f.OverbookLimit-f.Sold-f.Held)
}

// Service reads and sells flights.
type Service struct {
	pool      *pgxpool.Pool
	clock     clock.Clock
	log       *slog.Logger
	holdTTL   time.Duration
	holdLimit booking.HoldLimit
	offerTTL  time.Duration
	buckets   int
	coalescer *coalesce.Coalescer[int64, HoldRequest, *booking.Booking] // nil: one statement per hold
	// reads serves searches and seat maps: a read-only replica when one is
	// configured, else pool. They may be a few seconds stale anyway.
	reads func() *pgxpool.Pool

	// expirer ends a sold-out class's overdue holds (SetExpirer); nil:
	// the sweeper alone does.
	expirer Expirer

	seatMaps *cache.Cache[*SeatMap]
	searches *cache.Cache[[]*Flight]
	airports *cache.Cache[[]Airport] // the one list, a minute at a time
}

// Expirer ends overdue holds of some classes of a flight, one at a time
// (booking.Lifecycle.ExpireOneOf).
type Expirer interface {
	ExpireOneOf(ctx context.Context, db pg.Beginner, flight int64, classes []string) (bool, error)
}

// SetExpirer makes holds that find a class sold out end its overdue holds
// through e, before the service takes requests.
func (s *Service) SetExpirer(e Expirer) { s.expirer = e }

// Config tunes a Service.
type Config struct {
	HoldTTL time.Duration // how long a hold lasts (BERTH_FLIGHT_HOLD_TTL)
	// HoldLimit is the per-customer hold limit (BERTH_HOLD_LIMIT; zero:
	// none), shared with car holds.
	HoldLimit booking.HoldLimit
	// OfferTTL is how long a waitlist offer's hold lasts
	// (BERTH_WAITLIST_OFFER_TTL; default 10m).
	OfferTTL    time.Duration
	SeatMapTTL  time.Duration // how stale a seat map may be (2–5 s)
	SearchTTL   time.Duration // how stale a search may be
	MaxCacheKey int
	// Buckets is how many counter rows a new fare class's quota is split
	// over (default 1).
	Buckets int
	// Coalesce turns on batching of concurrent holds on one flight into
	// one transaction, up to MaxBatch holds, waiting Linger before the
	// first flush of a burst.
	Coalesce bool
	MaxBatch int
	Linger   time.Duration
	// Flushes is how many batches of one flight this process may have in
	// the database at once (BERTH_HOLD_FLUSHES, default 4): since
	// hold_flight locks the fare buckets last, the batches write their
	// bookings, seats and events side by side and queue only for the
	// counter update and the commit. Fewer make larger batches, and the
	// database's cost per hold falls with a batch's size: on two cores,
	// 32 clients on one hot flight, 1 made batches of 16 and left a fifth
	// of the CPUs idle for as many holds/s as 4 (batches of 5, CPUs
	// busy); with 128 clients, and in a flash sale, no difference stood
	// out of the runs' spread (docs/scaling.md).
	Flushes int
	// QueueWait bounds how long a coalesced hold waits for its batch to
	// start (0: no bound); past it the hold is answered 503 overloaded.
	QueueWait time.Duration
	// Slots bounds the coalesced batches under way at once (nil: no
	// bound), shared with car holds: one per connection holds may use.
	Slots    coalesce.Slots
	Log      *slog.Logger
	Registry prometheus.Registerer
	// Reads, when set, returns the pool searches and seat maps use now:
	// the read replica (BERTH_DATABASE_READ_URL) while it is current, else
	// the primary. Holds never read through it.
	Reads func() *pgxpool.Pool
}

// NewService returns a flight service on pool.
func NewService(pool *pgxpool.Pool, c clock.Clock, cfg Config) *Service {
	if cfg.MaxCacheKey == 0 {
		cfg.MaxCacheKey = 10_000
	}
	if cfg.OfferTTL <= 0 {
		cfg.OfferTTL = 10 * time.Minute
	}
	if cfg.Buckets < 1 {
		cfg.Buckets = 1
	}
	if cfg.MaxBatch < 1 {
		cfg.MaxBatch = 64
	}
	if cfg.Flushes < 1 {
		cfg.Flushes = 4
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	reads := cfg.Reads
	if reads == nil {
		reads = func() *pgxpool.Pool { return pool }
	}
	s := &Service{
		pool:      pool,
		reads:     reads,
		clock:     c,
		log:       cfg.Log,
		holdTTL:   cfg.HoldTTL,
		holdLimit: cfg.HoldLimit,
		offerTTL:  cfg.OfferTTL,
		buckets:   cfg.Buckets,
		seatMaps:  cache.New[*SeatMap](cfg.SeatMapTTL, cfg.MaxCacheKey),
		searches:  cache.New[[]*Flight](cfg.SearchTTL, cfg.MaxCacheKey),
		airports:  cache.New[[]Airport](time.Minute, 1),
	}
	if cfg.Coalesce {
		s.coalescer = newCoalescer(s, cfg)
	}
	return s
}

// newCoalescer batches the holds of each flight (see coalesce) into one
// holdBatch statement. Its target wait is an eighth of the queue wait: in
// a standing overload a hold waits a quarter of the shed wait at most for
// its batch.
func newCoalescer(s *Service, cfg Config) *coalesce.Coalescer[int64, HoldRequest, *booking.Booking] {
	return coalesce.New(coalesce.Config[int64, HoldRequest, *booking.Booking]{
		Many:     s.holdMany,
		Busy:     coalesce.Overloaded[int64]("flight"),
		MaxBatch: cfg.MaxBatch, Flushes: cfg.Flushes, Slots: cfg.Slots, Linger: cfg.Linger, Regroup: 2 * time.Millisecond,
		QueueWait: cfg.QueueWait, Target: cfg.QueueWait / 8, Metric: "berth_hold_batch", What: "Flight holds", Registry: cfg.Registry, Log: cfg.Log,
	})
}

const flightColumns = `f.id, f.code, f.origin, f.destination, f.departure_at, f.arrival_at, o.tz, d.tz`

func scanFlight(row pgx.Row) (*Flight, error) {
	var (
		f        Flight
		otz, dtz string
		dep, arr time.Time
	)
	if err := row.Scan(&f.ID, &f.Code, &f.From, &f.To, &dep, &arr, &otz, &dtz); err != nil {
		return nil, err
	}
	f.DepartureAt = inZone(dep, otz)
	f.ArrivalAt = inZone(arr, dtz)
	return &f, nil
}

func inZone(t time.Time, tz string) time.Time {
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return t.UTC()
	}
	return t.In(loc)
}

// Get returns flight id with its fares. Returns fault.NotFound.
func (s *Service) Get(ctx context.Context, id int64) (*Flight, error) {
	f, err := scanFlight(s.pool.QueryRow(ctx, `SELECT `+flightColumns+` FROM flight f
		JOIN airport o ON o.code = f.origin JOIN airport d ON d.code = f.destination WHERE f.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fault.New(fault.NotFound, "no flight %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get flight %d: %w", id, err)
	}
	if err := loadFares(ctx, s.pool, []*Flight{f}, s.clock.Now()); err != nil {
		return nil, err
	}
	return f, nil
}

// loadFares reads the fares of flights, their counters as they read at now
// (Fare.Held).
func loadFares(ctx context.Context, db *pgxpool.Pool, flights []*Flight, now time.Time) error {
	if len(flights) == 0 {
		return nil
	}
	ids := make([]int64, len(flights))
	byID := make(map[int64]*Flight, len(flights))
	for i, f := range flights {
		ids[i] = f.ID
		byID[f.ID] = f
	}
	rows, err := db.Query(ctx, `SELECT fi.flight_id, fi.fare_class, fi.price, fi.currency, fi.capacity, fi.overbook_limit,
			b.sold, b.held - coalesce(x.units, 0), b.buckets, fi.refund_rule
		FROM fare_inventory fi
		CROSS JOIN LATERAL (SELECT coalesce(sum(sold), 0)::int AS sold, coalesce(sum(held), 0)::int AS held, count(*)::int AS buckets
			FROM fare_bucket WHERE flight_id = fi.flight_id AND fare_class = fi.fare_class) b
		LEFT JOIN (SELECT flight_id, fare_class, sum(quantity)::int AS units FROM booking
			WHERE status = 'HELD' AND hold_expires_at <= $2 AND flight_id = ANY($1) GROUP BY 1, 2) x
			ON x.flight_id = fi.flight_id AND x.fare_class = fi.fare_class
		WHERE fi.flight_id = ANY($1) ORDER BY fi.flight_id, fi.price DESC, fi.fare_class`, ids, now)
	if err != nil {
		return fmt.Errorf("load fares: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id   int64
			fare Fare
			rule []byte
		)
		if err := rows.Scan(&id, &fare.Class, &fare.Price, &fare.Currency, &fare.Capacity, &fare.OverbookLimit,
			&fare.Sold, &fare.Held, &fare.Buckets, &rule); err != nil {
			return fmt.Errorf("load fares: %w", err)
		}
		if err := json.Unmarshal(rule, &fare.RefundRule); err != nil {
			return fmt.Errorf("fare %s of flight %d: refund rule: %w", fare.Class, id, err)
		}
		fare.Departed = !byID[id].DepartureAt.After(now)
		byID[id].Fares = append(byID[id].Fares, fare)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load fares: %w", err)
	}
	return nil
}

// FareChange is an admin's change to a fare class; nil fields stay as they
// are.
type FareChange struct {
	// OverbookLimit is the controlled parameter of deliberate overbooking.
	OverbookLimit *int
	// Buckets re-splits the quota over this many counter rows (it can only
	// grow, since bookings keep the bucket they were counted in).
	Buckets *int
}

// ChangeFare applies c to a fare class, locking its buckets: it refuses
// (fault.InvalidState) an overbooking limit below what is already sold
// and held, or too small for an entry waiting in the class's line, and returns fault.NotFound for an unknown flight or class. The
// class's free room is spread evenly over its buckets again, and what the
// change frees is offered to the class's waitlist in the same transaction.
func (s *Service) ChangeFare(ctx context.Context, id int64, class string, c FareChange) (*Fare, error) {
	if c.OverbookLimit != nil && (*c.OverbookLimit < 0 || *c.OverbookLimit > maxCapacity) {
		return nil, fault.Invalid("overbookLimit", "must be between 0 and %d", maxCapacity)
	}
	if c.Buckets != nil && (*c.Buckets < 1 || *c.Buckets > maxBuckets) {
		return nil, fault.Invalid("buckets", "must be between 1 and %d", maxBuckets)
	}
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var capacity, limit int
		err := tx.QueryRow(ctx, `SELECT capacity, overbook_limit FROM fare_inventory WHERE flight_id = $1 AND fare_class = $2 FOR UPDATE`,
			id, class).Scan(&capacity, &limit)
		if errors.Is(err, pgx.ErrNoRows) {
			return fault.New(fault.NotFound, "flight %d has no fare class %s", id, class)
		}
		if err != nil {
			return fmt.Errorf("change fare: %w", err)
		}
		bs, err := lockBuckets(ctx, tx, id, class)
		if err != nil {
			return err
		}
		if c.OverbookLimit != nil {
			limit = *c.OverbookLimit
		}
		if c.Buckets != nil {
			if *c.Buckets < len(bs) {
				return fault.Invalid("buckets", "the class has %d buckets; they can only grow", len(bs))
			}
			if *c.Buckets > len(bs) {
				if _, err := tx.Exec(ctx, `INSERT INTO fare_bucket (flight_id, fare_class, bucket, quota)
					SELECT $1, $2, n, 0 FROM generate_series($3::int, $4::int - 1) AS n ORDER BY n`,
					id, class, len(bs), *c.Buckets); err != nil {
					return fmt.Errorf("add bucket: %w", err)
				}
			}
			for n := len(bs); n < *c.Buckets; n++ {
				bs = append(bs, bucket{n: int16(n)})
			}
		}
		used := 0
		for _, b := range bs {
			used += b.sold + b.held
		}
		if used > capacity+limit {
			return fault.New(fault.InvalidState, "%d units sold and held already exceed capacity %d plus a limit of %d",
				used, capacity, limit)
		}
		// An entry of the line larger than the class would be could never
		// be offered, and every walk-in would queue behind it for ever.
		// (JoinWaitlist reads the class's size under a share lock of the
		// row locked above, so no join slips in with the old size.)
		var longest int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(quantity), 0) FROM waitlist
			WHERE flight_id = $1 AND fare_class = $2 AND status = 'WAITING'`, id, class).Scan(&longest); err != nil {
			return fmt.Errorf("change fare: read the waitlist: %w", err)
		}
		if longest > capacity+limit {
			return fault.New(fault.InvalidState, "a waitlist entry waits for %d units: capacity %d plus a limit of %d would never seat it",
				longest, capacity, limit)
		}
		shares := splitQuota(capacity+limit-used, len(bs))
		for i := range bs {
			bs[i].quota = bs[i].sold + bs[i].held + shares[i]
		}
		if _, err := tx.Exec(ctx, `UPDATE fare_inventory SET overbook_limit = $3 WHERE flight_id = $1 AND fare_class = $2`,
			id, class, limit); err != nil {
			return fmt.Errorf("change fare: %w", err)
		}
		if err := writeBuckets(ctx, tx, id, map[string][]bucket{class: bs}); err != nil {
			return err
		}
		// A raised limit frees units: the line is served first.
		return offerFreed(ctx, tx, id, class, s.clock.Now(), s.offerTTL)
	})
	if err != nil {
		return nil, err
	}
	s.seatMaps.Forget(strconv.FormatInt(id, 10))
	f, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, fare := range f.Fares {
		if fare.Class == class {
			return &fare, nil
		}
	}
	return nil, fmt.Errorf("change fare: class %s vanished", class)
}

// Inventory returns the booking.Inventory of flights.
func (s *Service) Inventory() booking.Inventory { return inventory{offerTTL: s.offerTTL} }
