package guard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
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
	// wait is how long a request waits for another request's hold in
	// flight on one of its seats to be decided (a third of
	// BERTH_SHED_WAIT).
	wait  time.Duration
	hint  time.Duration // how long a sold-out answer is believed (1 s)
	local time.Duration // how long this process believes it without asking Redis
	m     *metrics

	mu    sync.Mutex
	hints map[string]localHint // by hint key
	taken map[string]time.Time // seat keys another request holds, until when
	// pending are the seat keys of this process's holds in flight, each
	// with a channel closed when its hold is decided: a request of this
	// process waiting for one is woken then, not by asking Redis again.
	pending map[string]chan struct{}
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

// maxLocalHint is how long a process believes a sold-out hint without
// asking Redis: a sold-out flood of a class costs Redis two asks a second
// per process. A release anywhere clears every process's copy at once
// (Forget's broadcast, Listen); only while that broadcast cannot reach a
// process (Redis unreachable) does a copy outlive a release, by this much.
const maxLocalHint = 500 * time.Millisecond

func newGate(r *Redis, c clock.Clock, ttl, hint, shedWait time.Duration, m *metrics) *Gate {
	return &Gate{r: r, clock: c, ttl: ttl, hint: hint, wait: shedWait / 3, local: min(hint/2, maxLocalHint), m: m,
		hints: make(map[string]localHint), taken: make(map[string]time.Time), pending: make(map[string]chan struct{})}
}

// A seat key is "deadline:nonce" while its request's hold is in flight
// (pending: it may still fail, and then it is released) and
// "deadline:held" once the database made the hold. Only a held key turns a
// request away; a pending one makes it wait for the answer.

// gateEnter checks the class's sold-out hint (KEYS[1]) and then sets every
// seat key (KEYS[2..]) to ARGV[3] at once, or none: it returns {-1} when the
// hint says sold out for this many units, {i, deadline, 1} when seat i is
// held, {i, deadline, 0} when seat i's hold is in flight, {0} when the
// caller now holds all the keys.
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
local pending = nil
for i = 2, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if v then
    local d, rest = string.match(v, '^(%d+):(.*)$')
    if d and tonumber(d) > now then
      if rest == 'held' then return {i - 1, tonumber(d), 1} end
      pending = pending or {i - 1, tonumber(d), 0}
    end
  end
end
if pending then return pending end
for i = 2, #KEYS do
  redis.call('SET', KEYS[i], ARGV[3], 'PX', ARGV[4])
end
return {0, 0, 0}
`)

// gateHeld marks every seat key (KEYS) held, to ARGV[1] ("deadline:held"),
// for ARGV[2] ms: the database made the hold. Whatever the key held is
// replaced: a request still in flight on one of the seats can only lose it.
var gateHeld = redis.NewScript(`
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return #KEYS
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

// gatePass is what enter leaves: the seat keys it set, to release if the
// hold is refused or to mark held if it is made.
type gatePass struct {
	keys     []string
	value    string
	deadline time.Time // the keys' deadline, fixed before the hold is made
	// decided is closed when the hold is decided.
	decided chan struct{}
}

// gateEnter's answers: {-1, units, deadline} sold out, {i, deadline, 1}
// seat i held, {i, deadline, 0} seat i's hold in flight, {0, 0, 0} keys
// taken.

// pendingPoll is how soon a request asks again about a seat whose hold is
// in flight, doubled each time up to pendingPollMax: a hold usually takes
// a few milliseconds, but in a saturated sale a hundred or more, and a
// crowd asking every few milliseconds all that time would load Redis for
// nothing.
const (
	pendingPoll    = 2 * time.Millisecond
	pendingPollMax = 16 * time.Millisecond
)

// enter turns away a request that the hint says is sold out (fault.SoldOut)
// or one of whose seats is held (fault.SeatUnavailable); otherwise it
// holds the keys of all the seats until release, or until their hold is
// made and marks them held. A seat whose hold is still in flight is no
// reason to refuse at once, since that hold may fail (its request may be
// over its hold limit, or ask for a seat that does not exist, and such
// fail fast): the request waits for the answer, and is refused only if
// the seat is then held or that hold is still undecided after wait (by
// then most likely to be made; a crowd racing for one seat is answered
// 409 within that wait, never sent on to queue for the database). With
// Redis unreachable it steps aside.
func (g *Gate) enter(ctx context.Context, flight int64, class string, seats []string, units int) (*gatePass, error) {
	now := g.clock.Now()
	keys := g.keys(flight, class, seats)
	if err := g.refuseInProcess(flight, class, seats, units, keys, now); err != nil {
		return nil, err
	}
	hk := keys[0]
	deadline := now.Add(g.ttl)
	value := keyValue(deadline, nonce())
	giveUp := time.Now().Add(g.wait)
	for poll := pendingPoll; ; poll = min(2*poll, pendingPollMax) {
		if !g.r.Usable() {
			g.m.fallback.WithLabelValues("seat_gate").Inc()
			return nil, nil
		}
		now = g.clock.Now()
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
		case res[0] > 0 && res[2] == 1:
			g.rememberTaken(keys[res[0]], time.UnixMilli(res[1]), now)
			g.m.turnedAway.WithLabelValues("seat_gate").Inc()
			return nil, seatTaken(seats[res[0]-1])
		case res[0] > 0:
			left := time.Until(giveUp)
			if left <= 0 {
				g.m.turnedAway.WithLabelValues("seat_gate_in_flight").Inc()
				return nil, seatTaken(seats[res[0]-1])
			}
			if err := g.awaitHold(ctx, keys[res[0]], poll, left); err != nil {
				return nil, err
			}
			continue
		}
		if len(seats) == 0 {
			return nil, nil
		}
		g.m.admitted.WithLabelValues("seat_gate").Inc()
		return g.track(&gatePass{keys: keys[1:], value: value, deadline: deadline}), nil
	}
}

// keyValue is a seat key's value: its deadline, then what it says (a
// request's nonce while its hold is in flight, "held" once made).
func keyValue(deadline time.Time, what string) string {
	return strconv.FormatInt(deadline.UnixMilli(), 10) + ":" + what
}

// awaitHold waits, at most left, for the hold in flight on key to be
// decided: woken when it is decided if it is this process's, else after
// pause (to ask Redis again).
func (g *Gate) awaitHold(ctx context.Context, key string, pause, left time.Duration) error {
	g.mu.Lock()
	decided := g.pending[key]
	g.mu.Unlock()
	if decided == nil {
		left = min(pause, left)
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-decided:
	case <-t.C:
	}
	return nil
}

// track records p's keys as this process's holds in flight, for awaitHold
// to be woken by decide.
func (g *Gate) track(p *gatePass) *gatePass {
	p.decided = make(chan struct{})
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range p.keys {
		if _, ok := g.pending[k]; !ok {
			g.pending[k] = p.decided
		}
	}
	return p
}

// decide wakes the requests of this process waiting for p's hold, once,
// after Redis has been told its outcome.
func (g *Gate) decide(p *gatePass) {
	if p == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.decided == nil {
		return
	}
	for _, k := range p.keys {
		if g.pending[k] == p.decided {
			delete(g.pending, k)
		}
	}
	close(p.decided)
	p.decided = nil
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
	defer g.decide(p)
	if p == nil || !g.r.Usable() {
		return
	}
	if err := gateRelease.Run(ctx, g.r.Cmd, p.keys, p.value).Err(); err != nil {
		g.r.Fail("seat_gate_release", err)
		return
	}
	g.r.OK()
}

// held marks the keys of p held: the database made its hold. They keep the
// deadline fixed before the hold was made, so they are gone by the time it
// expires.
func (g *Gate) held(ctx context.Context, p *gatePass) {
	defer g.decide(p)
	if p == nil || !g.r.Usable() {
		return
	}
	ttl := p.deadline.Sub(g.clock.Now())
	if ttl <= 0 {
		return
	}
	if err := gateHeld.Run(ctx, g.r.Cmd, p.keys, keyValue(p.deadline, "held"), max(1, ttl.Milliseconds())).Err(); err != nil {
		g.r.Fail("seat_gate_held", err)
		return
	}
	g.r.OK()
}

// soldOutSeen records the database's sold_out for units of a class, whose
// first held units come back on sale at freeAt (zero: none will): the hint
// lasts until then at the most, so a hold that runs out is for sale at
// once, as every read already shows it.
func (g *Gate) soldOutSeen(ctx context.Context, flight int64, class string, units int, freeAt time.Time) {
	now := g.clock.Now()
	hk := g.hintKey(flight, class)
	deadline := now.Add(g.hint)
	if !freeAt.IsZero() && freeAt.Before(deadline) {
		deadline = freeAt
	}
	ttl := deadline.Sub(now).Milliseconds()
	if ttl <= 0 {
		return
	}
	g.remember(hk, units, deadline, now)
	if !g.r.Usable() {
		return
	}
	err := hintSet.Run(ctx, g.r.Cmd, []string{hk}, now.UnixMilli(), units, deadline.UnixMilli(), ttl).Err()
	if err != nil {
		g.r.Fail("sold_out_hint", err)
		return
	}
	g.r.OK()
}

// Forget drops the seat keys and the sold-out hint of a booking whose seats
// just came back (a cancellation), so the next buyer is not turned away by
// an answer that is no longer true: in Redis, in this process, and, by a
// broadcast in the same round trip, in every process that Listens.
func (g *Gate) Forget(ctx context.Context, flight int64, class string, seats []string) {
	keys := g.keys(flight, class, seats)
	g.forgetLocally(keys)
	if !g.r.Usable() {
		return
	}
	_, err := g.r.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, keys...)
		p.Publish(ctx, g.r.key(forgetChannel), strings.Join(keys, "\n"))
		return nil
	})
	if err != nil {
		g.r.Fail("seat_gate_forget", err)
		return
	}
	g.r.OK()
}

// forgetChannel is the Redis channel (under the prefix) Forget broadcasts
// the keys it dropped on.
const forgetChannel = "forget"

// forgetLocally drops what this process remembers of keys.
func (g *Gate) forgetLocally(keys []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range keys {
		delete(g.hints, k)
		delete(g.taken, k)
	}
}

// Listen drops what this process remembers of the keys any process's
// Forget broadcasts, until ctx ends. go-redis resubscribes after a lost
// connection; meanwhile the copies lapse on their own (maxLocalHint, the
// 250 ms of a seat seen held).
func (g *Gate) Listen(ctx context.Context) {
	sub := g.r.Client.Subscribe(ctx, g.r.key(forgetChannel))
	defer func() { _ = sub.Close() }()
	msgs := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			g.forgetLocally(strings.Split(m.Payload, "\n"))
		}
	}
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
