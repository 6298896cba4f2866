package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Scenarios.
const (
	FlashSale = "flash-sale"
	CarPeak   = "car-peak"
)

// Options are the settings of one `berth bench` run. Start from Defaults
// (or Quick) and change what you need.
type Options struct {
	// Scenario is FlashSale or CarPeak.
	Scenario string
	// Protect is "on", "off" or "both": which modes to run. Both runs off
	// and on one after the other, so they compare on the same machine.
	Protect string
	// DatabaseURL points at any database of the PostgreSQL server to use;
	// the bench creates (and drops, unless Keep) a fresh database per mode
	// beside it, named berth_bench_….
	DatabaseURL string
	// RedisURL is passed to berth as BERTH_REDIS_URL (empty: berth's
	// embedded substitute).
	RedisURL string
	Keep     bool
	Seed     uint64
	// Processes lists how many berth processes to run each mode with,
	// side by side (1, 2 or both): the processes share the mode's
	// database and Redis, and the load is split evenly between them.
	Processes []int
	// ServeArgv, when set, is the command that runs `berth serve` (the
	// bench adds the settings to its environment): each berth under test
	// is then a process of its own, whose memory the report samples.
	// Nil: berth runs inside the bench's process (tests).
	ServeArgv []string

	// Flash sale: Flights flights of 180 seats, Rate hold attempts a
	// second for Duration, flight popularity Zipf-like with exponent Zipf.
	Flights   int
	Rate      float64
	Duration  time.Duration
	SeatShare float64 // share of holds that name 1–3 adjacent seats; the rest hold a quantity
	PayShare  float64 // share of successful holds that go on to pay
	Zipf      float64
	// WaitingRoom, when above zero, switches each sale flight's waiting
	// room on with that admitPerSecond (protected mode only); customers
	// then poll their ticket for up to WaitMax and retry with the token.
	WaitingRoom int
	WaitMax     time.Duration

	// Car peak: Cars popular cars, SearchRate searches and CarHoldRate car
	// holds a second for Duration.
	Cars        int
	SearchRate  float64
	CarHoldRate float64
	// UncachedSearchRate is searches a second, besides SearchRate, that
	// each ask a question no one asked before (a period of their own),
	// so that berth's search cache cannot answer them (0: none).
	UncachedSearchRate float64

	// Closed loops, ClosedDuration each: holds on one hot flight by one
	// client, by HotClients and by HotClientsMore clients (0: skipped);
	// rejections and the bare net/http handler by RejectClients clients.
	// NoClosed skips them.
	HotClients     int
	HotClientsMore int
	RejectClients  int
	ClosedDuration time.Duration
	NoClosed       bool
	// StatsSettle is how long the hot-flight loops wait before reading the
	// database's transaction counters (PostgreSQL reports an idle
	// session's statistics up to 10 s late); 0 reads at once, and the
	// commits per hold are then approximate.
	StatsSettle time.Duration

	// Conns bounds the requests in flight of one open-loop stream (and so
	// its connections); Timeout bounds one request; Drain is how long the
	// run waits past Duration for late answers; Settle is the pause before
	// berth stops, for payments' webhooks to land.
	Conns   int
	Timeout time.Duration
	Drain   time.Duration
	Settle  time.Duration

	// Getenv supplies BERTH_* settings for the berth under test (pool
	// size, hold limit, …); the bench sets the database, secrets, address
	// and BERTH_PROTECT itself. Nil: none.
	Getenv func(string) string
	// Progress receives a line a second while the load runs (nil: none).
	Progress io.Writer
	// ServerLog receives berth's warnings and errors (nil: discarded).
	ServerLog io.Writer
	// HotProfile, when set, receives a CPU profile of this process taken
	// over the protected mode's hot-flight loop with HotClients clients
	// (the first such loop of the run): berth's hold path under load when
	// berth runs in process (ServeArgv nil), beside the load generator.
	HotProfile io.Writer
	// BeforeAudit, when set, runs on the mode's database just before the
	// audit. Tests use it to corrupt the database and see the run fail.
	BeforeAudit func(ctx context.Context, pool *pgxpool.Pool) error
}

// Defaults are sized for a 2-core machine running berth, PostgreSQL and
// the load generator at once.
func Defaults() Options {
	return Options{
		Scenario:    FlashSale,
		Protect:     "both",
		Seed:        1,
		Flights:     20,
		Rate:        2000,
		Duration:    20 * time.Second,
		SeatShare:   0.7,
		PayShare:    0.3,
		Zipf:        1.1,
		WaitMax:     10 * time.Second,
		Processes:   []int{1},
		Cars:        300,
		SearchRate:  3000,
		CarHoldRate: 300,
		// UncachedSearchRate: a tenth of the searches miss the cache.
		UncachedSearchRate: 300,
		HotClients:         32,
		HotClientsMore:     128,
		RejectClients:      64,
		ClosedDuration:     5 * time.Second,
		StatsSettle:        11 * time.Second,
		Conns:              512,
		Timeout:            10 * time.Second,
		Drain:              5 * time.Second,
		Settle:             time.Second,
	}
}

// Quick is a short, gentle run for tests and smoke checks: a couple of
// seconds at a low rate.
func Quick() Options {
	o := Defaults()
	o.Flights = 4
	o.Rate = 100
	o.Duration = 2 * time.Second
	o.Cars = 30
	o.SearchRate = 100
	o.CarHoldRate = 20
	o.UncachedSearchRate = 20
	o.HotClients = 4
	o.HotClientsMore = 8
	o.RejectClients = 4
	o.ClosedDuration = time.Second
	o.StatsSettle = 0
	o.Conns = 64
	o.Timeout = 5 * time.Second
	o.Drain = 2 * time.Second
	o.Settle = 200 * time.Millisecond
	o.WaitMax = 2 * time.Second
	return o
}

// modes returns the Protect values to run, bare design first.
func (o *Options) modes() []bool {
	switch o.Protect {
	case "on":
		return []bool{true}
	case "off":
		return []bool{false}
	}
	return []bool{false, true}
}

// Validate names the first setting that cannot work.
func (o *Options) Validate() error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--"+name+": "+format, args...))
	}
	switch o.Scenario {
	case FlashSale, CarPeak:
	default:
		bad("scenario", "%q is not %s or %s", o.Scenario, FlashSale, CarPeak)
	}
	switch o.Protect {
	case "on", "off", "both":
	default:
		bad("protect", "%q is not on, off or both", o.Protect)
	}
	if o.DatabaseURL == "" {
		bad("database-url", "is required (or BERTH_DATABASE_URL): a postgres:// URL of a server where the bench may create databases")
	}
	positive := map[string]float64{"rate": o.Rate, "search-rate": o.SearchRate, "car-hold-rate": o.CarHoldRate}
	for name, v := range positive {
		if v <= 0 || v > 1_000_000 {
			bad(name, "%g must be between 0 and 1,000,000 a second", v)
		}
	}
	if o.UncachedSearchRate < 0 || o.UncachedSearchRate > 1_000_000 {
		bad("uncached-search-rate", "%g must be between 0 and 1,000,000 a second", o.UncachedSearchRate)
	}
	if len(o.Processes) == 0 {
		bad("processes", "is empty: 1, 2 or both")
	}
	for _, n := range o.Processes {
		if n < 1 || n > 8 {
			bad("processes", "%d must be between 1 and 8", n)
		}
		if n > 1 && o.RedisURL == "" && o.Protect != "off" {
			bad("processes", "%d processes need --redis-url (BERTH_REDIS_URL): the embedded substitute is one per process, so the surge layers would not be shared", n)
		}
	}
	if o.HotClientsMore < 0 || o.HotClientsMore > 20_000 {
		bad("hot-clients-more", "%d must be between 0 and 20000", o.HotClientsMore)
	}
	if o.Duration < 500*time.Millisecond || o.Duration > time.Hour {
		bad("duration", "%s must be between 500ms and 1h", o.Duration)
	}
	if o.Flights < 1 || o.Flights > 10_000 {
		bad("flights", "%d must be between 1 and 10000", o.Flights)
	}
	if o.Cars < 1 || o.Cars > 100_000 {
		bad("cars", "%d must be between 1 and 100000", o.Cars)
	}
	for name, v := range map[string]float64{"seat-share": o.SeatShare, "pay-share": o.PayShare} {
		if v < 0 || v > 1 {
			bad(name, "%g must be between 0 and 1", v)
		}
	}
	if o.Zipf <= 1 || o.Zipf > 5 {
		bad("zipf", "%g must be above 1 and at most 5", o.Zipf)
	}
	if o.WaitingRoom < 0 {
		bad("waiting-room", "%d must not be negative", o.WaitingRoom)
	}
	for name, v := range map[string]int{"hot-clients": o.HotClients, "reject-clients": o.RejectClients, "conns": o.Conns} {
		if v < 1 || v > 20_000 {
			bad(name, "%d must be between 1 and 20000", v)
		}
	}
	for name, d := range map[string]time.Duration{"closed-duration": o.ClosedDuration, "timeout": o.Timeout, "wait-max": o.WaitMax} {
		if d < 100*time.Millisecond || d > time.Hour {
			bad(name, "%s must be between 100ms and 1h", d)
		}
	}
	for name, d := range map[string]time.Duration{"drain": o.Drain, "settle": o.Settle} {
		if d < 0 || d > time.Hour {
			bad(name, "%s must be between 0 and 1h", d)
		}
	}
	return errors.Join(errs...)
}

// settings renders the options for the report.
func (o *Options) settings() map[string]string {
	s := map[string]string{
		"scenario": o.Scenario, "protect": o.Protect, "seed": fmt.Sprint(o.Seed), "processes": fmt.Sprint(o.Processes),
		"duration": o.Duration.String(), "conns": fmt.Sprint(o.Conns), "timeout": o.Timeout.String(),
		"drain": o.Drain.String(),
	}
	switch o.Scenario {
	case FlashSale:
		s["flights"] = fmt.Sprint(o.Flights)
		s["rate"] = fmt.Sprint(o.Rate)
		s["seatShare"] = fmt.Sprint(o.SeatShare)
		s["payShare"] = fmt.Sprint(o.PayShare)
		s["zipf"] = fmt.Sprint(o.Zipf)
		s["waitingRoom"] = fmt.Sprint(o.WaitingRoom)
		s["waitMax"] = o.WaitMax.String()
	case CarPeak:
		s["cars"] = fmt.Sprint(o.Cars)
		s["searchRate"] = fmt.Sprint(o.SearchRate)
		s["carHoldRate"] = fmt.Sprint(o.CarHoldRate)
		s["uncachedSearchRate"] = fmt.Sprint(o.UncachedSearchRate)
	}
	if !o.NoClosed {
		s["hotClients"] = fmt.Sprint(o.HotClients)
		s["hotClientsMore"] = fmt.Sprint(o.HotClientsMore)
		s["rejectClients"] = fmt.Sprint(o.RejectClients)
		s["closedDuration"] = o.ClosedDuration.String()
	}
	return s
}

// ParseProcesses reads --processes: "1", "2", "1,2" or "both" (1 and 2).
func ParseProcesses(v string) ([]int, error) {
	if v == "both" {
		return []int{1, 2}, nil
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--processes: %q is not 1, 2, 1,2 or both", v)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("--processes: %d given twice", n)
		}
		out = append(out, n)
	}
	return out, nil
}
