package guard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
)

// The seat gate and the sold-out hint turn away, before the database, the
// requests that would surely lose (a "fast filter" in front of the
// database). Neither decides anything: a key lost or an answer missed only
// sends a request on to the database, which refuses it by its own rules.
//
// Expiry is measured on the injected clock: every value carries its
// deadline, and a value past it counts as absent whatever Redis's own TTL
// (which only collects the garbage) says. So tests move time, and processes
// agree as far as their clocks do.

// Gate is the seat gate and the sold-out hint.
type Gate struct {
	r     *Redis
	clock clock.Clock
	ttl   time.Duration // how long a seat's key keeps others out (15 s)
	hint  time.Duration // how long a sold-out answer is believed (1 s)
	local time.Duration // how long this process believes it without asking Redis
	m     *metrics

	mu    sync.Mutex
	hints map[string]localHint // by hint key
	taken map[string]time.Time // seat keys another request holds, until when
}

// localTaken is how long this process believes a seat's key is held by
// another request without asking Redis again: the hottest seats of a sale
// are asked for thousands of times a second, and this answers them in
// process. A key released early (the database refused its hold) can thus
// still turn buyers away here for this long.
const localTaken = 250 * time.Millisecond

type localHint struct {
	units    int
	deadline time.Time
}

// maxLocalHints bounds the sold-out hints kept in process.
const maxLocalHints = 10_000

func newGate(r *Redis, c clock.Clock, ttl, hint time.Duration, m *metrics) *Gate {
	return &Gate{r: r, clock: c, ttl: ttl, hint: hint, local: min(hint/2, 500*time.Millisecond), m: m,
		hints: make(map[string]localHint), taken: make(map[string]time.Time)}
}

// gateEnter checks the class's sold-out hint (KEYS[1]) and then sets every
// seat key (KEYS[2..]) to ARGV[3] at once, or none: it returns {-1} when the
// hint says sold out for this many units, {i} when seat i's key is held by
// another request, {0} when the caller now holds all the keys.
// ARGV: now (ms), units, the value (deadline ms ":" nonce), TTL (ms).
var gateEnter = redis.NewScript(`
local now = tonumber(ARGV[1])
local h = redis.call('GET', KEYS[1])
if h then
  local u, d = string.match(h, '^(%d+):(%d+)$')
  if u and tonumber(d) > now and tonumber(ARGV[2]) >= tonumber(u) then
    return {-1, tonumber(u), tonumber(d)}
  end
end
for i = 2, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if v then
    local d = string.match(v, '^(%d+):')
    if d and tonumber(d) > now then return {i - 1, tonumber(d), 0} end
  end
end
for i = 2, #KEYS do
  redis.call('SET', KEYS[i], ARGV[3], 'PX', ARGV[4])
end
return {0, 0, 0}
`)

// gateRelease deletes each key (KEYS) that still holds ARGV[1]: a request
// frees only its own keys, never a later request's.
var gateRelease = redis.NewScript(`
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
return n
`)

// hintSet records that units were refused as sold out: requests for at
// least the fewest units refused are turned away until the deadline.
// ARGV: now (ms), units, deadline (ms), TTL (ms).
var hintSet = redis.NewScript(`
local now, units = tonumber(ARGV[1]), tonumber(ARGV[2])
local h = redis.call('GET', KEYS[1])
if h then
  local u, d = string.match(h, '^(%d+):(%d+)$')
  if u and tonumber(d) > now and tonumber(u) < units then return 0 end
end
redis.call('SET', KEYS[1], ARGV[2] .. ':' .. ARGV[3], 'PX', ARGV[4])
return 1
`)

func (g *Gate) seatKey(flight int64, seat string) string {
	return g.r.key("seat:{", strconv.FormatInt(flight, 10), "}:", seat)
}

func (g *Gate) hintKey(flight int64, class string) string {
	return g.r.key("soldout:{", strconv.FormatInt(flight, 10), "}:", class)
}

// keys returns the class's hint key followed by the seats' keys.
func (g *Gate) keys(flight int64, class string, seats []string) []string {
	keys := make([]string, 0, len(seats)+1)
	keys = append(keys, g.hintKey(flight, class))
	for _, s := range seats {
		keys = append(keys, g.seatKey(flight, s))
	}
	return keys
}

// gatePass is what enter leaves to undo: the seat keys it set.
type gatePass struct {
	keys  []string
	value string
}

// gateEnter's answers: {-1, units, deadline} sold out, {i, deadline, 0} seat
// i held, {0, 0, 0} keys taken.

// enter turns away a request that the hint says is sold out (fault.SoldOut)
// or whose seats another request is holding right now
// (fault.SeatUnavailable); otherwise it holds the keys of all the seats
// until release or their TTL. With Redis unreachable it steps aside.
func (g *Gate) enter(ctx context.Context, flight int64, class string, seats []string, units int) (*gatePass, error) {
	now := g.clock.Now()
	keys := g.keys(flight, class, seats)
	if err := g.refuseInProcess(flight, class, seats, units, keys, now); err != nil {
		return nil, err
	}
	hk := keys[0]
	if !g.r.Usable() {
		g.m.fallback.WithLabelValues("seat_gate").Inc()
		return nil, nil
	}
	value := strconv.FormatInt(now.Add(g.ttl).UnixMilli(), 10) + ":" + nonce()
	res, err := gateEnter.Run(ctx, g.r.Cmd, keys, now.UnixMilli(), units, value, g.ttl.Milliseconds()).Int64Slice()
	if err != nil {
		g.r.Fail("seat_gate", err)
		g.m.fallback.WithLabelValues("seat_gate").Inc()
		return nil, nil
	}
	g.r.OK()
	switch {
	case res[0] < 0:
		g.remember(hk, int(res[1]), time.UnixMilli(res[2]), now)
		g.m.turnedAway.WithLabelValues("sold_out_hint").Inc()
		return nil, soldOut(flight, class)
	case res[0] > 0:
		g.rememberTaken(keys[res[0]], time.UnixMilli(res[1]), now)
		g.m.turnedAway.WithLabelValues("seat_gate").Inc()
		return nil, seatTaken(seats[res[0]-1])
	}
	if len(seats) == 0 {
		return nil, nil
	}
	g.m.admitted.WithLabelValues("seat_gate").Inc()
	return &gatePass{keys: keys[1:], value: value}, nil
}

// inProcess turns away, without asking Redis, a request that this process
// already knows the gate would refuse: the class was just found sold out,
// or one of the seats is held by another request. It returns nil when
// only Redis can tell.
func (g *Gate) inProcess(flight int64, class string, seats []string, units int) error {
	return g.refuseInProcess(flight, class, seats, units, g.keys(flight, class, seats), g.clock.Now())
}

func (g *Gate) refuseInProcess(flight int64, class string, seats []string, units int, keys []string, now time.Time) error {
	if g.localSoldOut(keys[0], units, now) {
		g.m.turnedAway.WithLabelValues("sold_out_hint").Inc()
		return soldOut(flight, class)
	}
	if i, ok := g.localTaken(keys[1:], now); ok {
		g.m.turnedAway.WithLabelValues("seat_gate").Inc()
		return seatTaken(seats[i])
	}
	return nil
}

// release frees the keys of p (when the database refused the hold, so that
// the seats are not blocked for others for the rest of the TTL: race 8 of docs/invariants.md).
func (g *Gate) release(ctx context.Context, p *gatePass) {
	if p == nil || !g.r.Usable() {
		return
	}
	if err := gateRelease.Run(ctx, g.r.Cmd, p.keys, p.value).Err(); err != nil {
		g.r.Fail("seat_gate_release", err)
		return
	}
	g.r.OK()
}

// soldOutSeen records the database's sold_out for units of a class.
func (g *Gate) soldOutSeen(ctx context.Context, flight int64, class string, units int) {
	now := g.clock.Now()
	hk := g.hintKey(flight, class)
	deadline := now.Add(g.hint)
	g.remember(hk, units, deadline, now)
	if !g.r.Usable() {
		return
	}
	err := hintSet.Run(ctx, g.r.Cmd, []string{hk}, now.UnixMilli(), units, deadline.UnixMilli(), g.hint.Milliseconds()).Err()
	if err != nil {
		g.r.Fail("sold_out_hint", err)
		return
	}
	g.r.OK()
}

// Forget drops the seat keys and the sold-out hint of a booking whose seats
// just came back (a cancellation), so the next buyer is not turned away by
// an answer that is no longer true. Other processes' in-memory hints lapse
// on their own within a fraction of a second.
func (g *Gate) Forget(ctx context.Context, flight int64, class string, seats []string) {
	keys := g.keys(flight, class, seats)
	g.mu.Lock()
	for _, k := range keys {
		delete(g.hints, k)
		delete(g.taken, k)
	}
	g.mu.Unlock()
	if !g.r.Usable() {
		return
	}
	if err := g.r.Cmd.Del(ctx, keys...).Err(); err != nil {
		g.r.Fail("seat_gate_forget", err)
		return
	}
	g.r.OK()
}

// localSoldOut reports whether this process believes the class is sold out
// for units, without asking Redis.
func (g *Gate) localSoldOut(hk string, units int, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	h, ok := g.hints[hk]
	if !ok {
		return false
	}
	if !now.Before(h.deadline) {
		delete(g.hints, hk)
		return false
	}
	return units >= h.units
}

// remember keeps a hint in process for at most the local lifetime, and
// never past the shared hint's deadline.
func (g *Gate) remember(hk string, units int, deadline, now time.Time) {
	if d := now.Add(g.local); d.Before(deadline) {
		deadline = d
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if h, ok := g.hints[hk]; ok && now.Before(h.deadline) && h.units < units {
		return
	}
	if len(g.hints) >= maxLocalHints {
		clear(g.hints)
	}
	g.hints[hk] = localHint{units: units, deadline: deadline}
}

// localTaken returns the index in seatKeys of a seat this process recently
// saw held by another request.
func (g *Gate) localTaken(seatKeys []string, now time.Time) (int, bool) {
	if len(seatKeys) == 0 {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.taken) == 0 {
		return 0, false
	}
	for i, k := range seatKeys {
		if until, ok := g.taken[k]; ok {
			if now.Before(until) {
				return i, true
			}
			delete(g.taken, k)
		}
	}
	return 0, false
}

// rememberTaken keeps for a moment that key is held by another request
// until deadline.
func (g *Gate) rememberTaken(key string, deadline, now time.Time) {
	if d := now.Add(localTaken); d.Before(deadline) {
		deadline = d
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.taken) >= maxLocalHints {
		clear(g.taken)
	}
	g.taken[key] = deadline
}

func seatTaken(seat string) error {
	return fault.New(fault.SeatUnavailable, "seat %s is being held by someone else", seat)
}

func soldOut(flight int64, class string) error {
	return fault.New(fault.SoldOut, "fare class %s of flight %d is sold out", class, flight)
}

// nonce returns a value unique to one request.
func nonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
