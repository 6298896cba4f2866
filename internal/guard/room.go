package guard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
)

// The waiting room (docs/api.md "Surge: waiting room"): while a flight's room is
// on, a hold needs an admission token. A caller without one gets a queue
// ticket; tickets are numbered by one counter per flight in Redis, and an
// admission frontier advances admitPerSecond per second, so callers are
// admitted first come first served across every berth process. A ticket
// whose number the frontier has passed is exchanged for a token
// (GET /waiting-room/{ticket}); a successful hold spends it.
//
// Tickets and tokens are signed (HMAC-SHA256 with a key derived from
// BERTH_AUTH_SECRET) and name the customer, the flight and the ticket
// number, so they cannot be forged, moved to another customer or flight, or
// renumbered; both expire. A token is spent by claiming its ticket number in
// Redis (SET NX) before the hold and keeping the claim when the hold
// succeeded (releasing it when it failed), so one admission buys one hold.
//
// The frontier moves by the injected clock (as all of berth's time), read
// by the process that asks; a process whose clock is behind never moves it
// back.

// RoomSettings is a flight's waiting room as an admin set it.
type RoomSettings struct {
	Enabled        bool
	AdmitPerSecond int
}

// Room is the waiting room of every flight.
type Room struct {
	r      *Redis
	pool   *pgxpool.Pool
	clock  clock.Clock
	key    []byte
	ticket time.Duration // how long a ticket (a place in the queue) lasts
	token  time.Duration // how long an admission token lasts
	on     bool          // enforced (BERTH_PROTECT); off, only the settings are kept
	log    *slog.Logger
	m      *metrics

	// settings of the rooms that are on, as last loaded (nil before the
	// first load); Run reloads them every settingsEvery, and a view older
	// than settingsFresh is never used.
	settings atomic.Pointer[roomSnapshot]
	refresh  singleflight.Group
	// changed is when (Unix ns) this process last changed a room: a view
	// loaded before it is not used, so the admin's own process applies a
	// change at once.
	changed atomic.Int64

	// fallback admits per process while Redis is unreachable.
	fbMu     sync.Mutex
	fallback map[int64]*rate.Limiter
	// spent remembers, while Redis is unreachable, the tokens spent here.
	spentMu sync.Mutex
	spent   map[string]time.Time
	// issued remembers the tickets this process handed out in the last
	// recallFor, so that a queued customer who keeps asking gets the same
	// ticket back without a round trip to Redis.
	issuedMu sync.Mutex
	issued   map[issuedKey]issuedTicket
}

type issuedKey struct{ flight, customer int64 }

// issuedTicket is a ticket as queue handed it out: its number, the
// signed ticket, and the room's frontier and rate at that moment.
type issuedTicket struct {
	seq    int64
	ticket string
	front  int64
	per    int
	at     time.Time
}

// recallFor is how long a ticket handed out here is handed out again
// without asking Redis. The position shown meanwhile is the frontier then,
// moved on at the room's rate; a ticket spent through another process may
// be shown for as long (its owner is then told to ask again).
const recallFor = time.Second

type roomSnapshot struct {
	rooms map[int64]int // admitPerSecond of the flights whose room is on
	// loaded is when the query that read rooms began: the view is at
	// least as new as the database was then.
	loaded time.Time
}

// settingsFresh bounds how old this process's view of the rooms' settings
// may be when it decides whether a hold needs an admission: an admin's
// change (a room switched on or off, its rate) is in force in every
// process within it, whether or not that process served anything
// meanwhile. Run keeps the view newer than that by reloading it every
// settingsEvery; a view found older (Run stalled, the database slow) is
// reloaded before the caller goes on, never used.
const (
	settingsFresh = time.Second
	settingsEvery = settingsFresh / 4
)

func newRoom(r *Redis, pool *pgxpool.Pool, c clock.Clock, secret []byte, ticket, token time.Duration, on bool, log *slog.Logger, m *metrics) *Room {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("berth/waiting-room/v1"))
	return &Room{r: r, pool: pool, clock: c, key: mac.Sum(nil), ticket: ticket, token: token, on: on, log: log, m: m,
		fallback: make(map[int64]*rate.Limiter), spent: make(map[string]time.Time), issued: make(map[issuedKey]issuedTicket)}
}

// Configure sets flight's waiting room and returns what is in force, once
// it is in force in every process (settingsFresh after the change, when the
// layers are on). AdmitPerSecond 0 keeps the current rate. Returns fault.NotFound for an
// unknown flight and fault.ValidationFailed for a rate out of range or a
// room switched on without one.
func (rm *Room) Configure(ctx context.Context, flight int64, enabled bool, admitPerSecond int) (RoomSettings, error) {
	if admitPerSecond < 0 || admitPerSecond > 100_000 {
		return RoomSettings{}, fault.Invalid("waitingRoom.admitPerSecond", "must be between 1 and 100000")
	}
	var out RoomSettings
	var rate *int
	err := rm.pool.QueryRow(ctx, `INSERT INTO waiting_room (flight_id, enabled, admit_per_second, updated_at)
		SELECT f.id, $2, coalesce(nullif($3::int, 0), w.admit_per_second, CASE WHEN $2 THEN 0 ELSE 1 END), $4
		FROM flight f LEFT JOIN waiting_room w ON w.flight_id = f.id WHERE f.id = $1
		ON CONFLICT (flight_id) DO UPDATE SET enabled = EXCLUDED.enabled,
			admit_per_second = EXCLUDED.admit_per_second, updated_at = EXCLUDED.updated_at
		RETURNING enabled, admit_per_second`, flight, enabled, admitPerSecond, rm.clock.Now()).Scan(&out.Enabled, &rate)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return RoomSettings{}, fault.New(fault.NotFound, "no flight %d", flight)
	case pg.Violates(err, "waiting_room_rate_check"):
		return RoomSettings{}, fault.Invalid("waitingRoom.admitPerSecond", "is required (between 1 and 100000)")
	case err != nil:
		return RoomSettings{}, fmt.Errorf("configure waiting room of flight %d: %w", flight, err)
	}
	out.AdmitPerSecond = *rate
	// This process sees the change at once (its next caller reloads); the
	// others within settingsFresh: a view whose query began before the
	// commit is never used once settingsFresh has passed. The answer waits
	// for that moment, so that when the admin is told the room is switched,
	// it is, in every process: the first burst of a sale, sent right after
	// the answer, is judged by the room as set, wherever it lands.
	committed := time.Now()
	rm.changed.Store(committed.UnixNano())
	if rm.on {
		t := time.NewTimer(time.Until(committed.Add(settingsFresh)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return RoomSettings{}, fmt.Errorf("configure waiting room of flight %d: stored, but the answer was cut: %w", flight, ctx.Err())
		}
	}
	return out, nil
}

// Settings returns flight's waiting room as stored (off when never set).
func (rm *Room) Settings(ctx context.Context, flight int64) (RoomSettings, error) {
	var s RoomSettings
	err := rm.pool.QueryRow(ctx, `SELECT enabled, admit_per_second FROM waiting_room WHERE flight_id = $1`, flight).
		Scan(&s.Enabled, &s.AdmitPerSecond)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("waiting room of flight %d: %w", flight, err)
	}
	return s, nil
}

// admitRate returns the admitPerSecond of flight's room, or 0 when it is
// off, from a view of the settings at most settingsFresh old. Run keeps
// the view fresh in the background, so the hot path has no database round
// trip; only a view that is too old (or none yet) makes the caller wait
// for a reload, which all callers of the moment share.
func (rm *Room) admitRate(ctx context.Context, flight int64) (int, error) {
	snap := rm.settings.Load()
	// Two reloads at most: the first may join one that began before the
	// view went stale.
	for tries := 0; !rm.fresh(snap); tries++ {
		if tries == 2 {
			return 0, Overloaded("the waiting room's settings cannot be read in time; try again shortly")
		}
		var err error
		if snap, err = rm.load(ctx); err != nil {
			return 0, err
		}
	}
	return snap.rooms[flight], nil
}

// fresh reports whether snap may decide who needs an admission now.
func (rm *Room) fresh(snap *roomSnapshot) bool {
	return snap != nil && time.Since(snap.loaded) <= settingsFresh && snap.loaded.UnixNano() >= rm.changed.Load()
}

// Run reloads the rooms' settings every settingsEvery until ctx ends, so
// that admitRate finds them fresh.
func (rm *Room) Run(ctx context.Context) {
	t := time.NewTicker(settingsEvery)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := rm.load(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			rm.log.Warn("reload waiting room settings", "err", err)
			failing = true
		case err == nil && failing:
			rm.log.Info("waiting room settings reloaded again")
			failing = false
		}
	}
}

// load reads the settings of the rooms that are on, once for all callers
// at a time. The query runs detached from the callers (and without their
// acquire budget: the first load must not fail because a flood of requests
// arrived with it); each caller waits only as long as its own context.
func (rm *Room) load(ctx context.Context) (*roomSnapshot, error) {
	ch := rm.refresh.DoChan("", func() (any, error) {
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		snap := &roomSnapshot{rooms: map[int64]int{}, loaded: time.Now()}
		rows, err := rm.pool.Query(lctx, `SELECT flight_id, admit_per_second FROM waiting_room WHERE enabled LIMIT 100000`)
		if err != nil {
			return nil, fmt.Errorf("load waiting rooms: %w", err)
		}
		var id int64
		var n int
		if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { snap.rooms[id] = n; return nil }); err != nil {
			return nil, fmt.Errorf("load waiting rooms: %w", err)
		}
		rm.store(snap)
		return snap, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, AsOverload(ctx, r.Err)
		}
		return r.Val.(*roomSnapshot), nil
	case <-ctx.Done():
		return nil, AsOverload(ctx, fmt.Errorf("load waiting rooms: %w", ctx.Err()))
	}
}

// store keeps snap as the view unless a newer one is already kept.
func (rm *Room) store(snap *roomSnapshot) {
	for {
		cur := rm.settings.Load()
		if cur != nil && cur.loaded.After(snap.loaded) {
			return
		}
		if rm.settings.CompareAndSwap(cur, snap) {
			return
		}
	}
}

// Warm loads the rooms' settings now, so that the first holds need not
// wait for them.
func (rm *Room) Warm(ctx context.Context) error {
	_, err := rm.load(ctx)
	return err
}

// roomTicket issues (or finds again: the same customer keeps their place)
// the customer's ticket, moving the frontier first. KEYS: the room's state
// (hash: seq, front, at), the customer's ticket. ARGV: now (ms), admit per
// second, the ticket's lifetime (ms), its expiry (ms). Returns {seq,
// frontier, expiry}.
var roomTicket = redis.NewScript(advanceFront + `
local mine, exp
local v = redis.call('GET', KEYS[2])
if v then
  mine, exp = string.match(v, '^(%d+):(%d+)$')
end
if not mine then
  seq = seq + 1
  mine, exp = seq, ARGV[4]
  redis.call('SET', KEYS[2], mine .. ':' .. exp, 'PX', ARGV[3])
end
` + saveFront + `
return {tonumber(mine), math.floor(front), tonumber(exp)}
`)

// advanceFront is the start of the room's scripts: it reads the room's
// state (KEYS[1]) and moves its frontier ARGV[2] per second up to now
// (ARGV[1], ms), never more than one second's worth past the last ticket.
const advanceFront = `
local now, per = tonumber(ARGV[1]), tonumber(ARGV[2])
local st = redis.call('HMGET', KEYS[1], 'seq', 'front', 'at')
local seq, front, at = tonumber(st[1]) or 0, tonumber(st[2]) or 0, tonumber(st[3]) or now
if now > at then
  front = front + (now - at) * per / 1000
  at = now
end
if front > seq + per then front = seq + per end
`

// saveFront stores what advanceFront (and the script) changed.
const saveFront = `
redis.call('HSET', KEYS[1], 'seq', seq, 'front', string.format('%.3f', front), 'at', at)
redis.call('PEXPIRE', KEYS[1], 86400000)
`

// roomFront moves the frontier and returns it, and whether ticket ARGV[3]
// was spent. KEYS: the room's state, the ticket's spent mark. ARGV: now
// (ms), admit per second.
var roomFront = redis.NewScript(advanceFront + saveFront + `
return {math.floor(front), redis.call('EXISTS', KEYS[2])}
`)

// roomSpent finishes a spent admission: the customer's ticket (KEYS[2]) is
// dropped if it is still this one (ARGV[1] = its number), so the next hold
// queues again; the spent mark (KEYS[1]) stays until the ticket would have
// expired.
var roomSpent = redis.NewScript(`
local v = redis.call('GET', KEYS[2])
if v and string.match(v, '^(%d+):') == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 1
`)

func (rm *Room) stateKey(flight int64) string {
	return rm.r.key("wr:{", strconv.FormatInt(flight, 10), "}")
}

func (rm *Room) customerKey(flight, customer int64) string {
	return rm.r.key("wr:{", strconv.FormatInt(flight, 10), "}:c:", strconv.FormatInt(customer, 10))
}

func (rm *Room) spentKey(flight, seq int64) string {
	return rm.r.key("wr:{", strconv.FormatInt(flight, 10), "}:spent:", strconv.FormatInt(seq, 10))
}

// pass is a signed ticket or token.
type pass struct {
	kind     byte // 't' ticket, 'a' admission token
	flight   int64
	customer int64
	seq      int64
	expires  time.Time
}

func (rm *Room) sign(p pass) string {
	body := fmt.Sprintf("%c%d.%d.%d.%d", p.kind, p.flight, p.customer, p.seq, p.expires.UnixMilli())
	mac := hmac.New(sha256.New, rm.key)
	mac.Write([]byte(body))
	return body + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:18])
}

// errPass is why a ticket or token is not accepted; never shown in detail.
var errPass = errors.New("invalid or expired")

func (rm *Room) verify(s string, kind byte, now time.Time) (pass, error) {
	i := strings.LastIndexByte(s, '.')
	if i < 1 || len(s) > 200 || s[0] != kind {
		return pass{}, errPass
	}
	body, sig := s[:i], s[i+1:]
	mac := hmac.New(sha256.New, rm.key)
	mac.Write([]byte(body))
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, mac.Sum(nil)[:18]) {
		return pass{}, errPass
	}
	parts := strings.Split(body[1:], ".")
	if len(parts) != 4 {
		return pass{}, errPass
	}
	var n [4]int64
	for j, p := range parts {
		if n[j], err = strconv.ParseInt(p, 10, 64); err != nil {
			return pass{}, errPass
		}
	}
	p := pass{kind: kind, flight: n[0], customer: n[1], seq: n[2], expires: time.UnixMilli(n[3])}
	if !now.Before(p.expires) {
		return pass{}, errPass
	}
	return p, nil
}

// Status is the answer of GET /waiting-room/{ticket}: a place in the queue,
// or an admission token.
type Status struct {
	Position  int64
	Admitted  bool
	Token     string
	ExpiresAt time.Time
}

// Status tells customer where ticket stands, and hands out an admission
// token once the frontier has passed it. Returns fault.NotFound for a
// ticket that is not valid for this customer (forged, expired, someone
// else's, or already used) and fault.Overloaded while Redis is unreachable.
func (rm *Room) Status(ctx context.Context, customer int64, ticket string) (Status, error) {
	now := rm.clock.Now()
	p, err := rm.verify(ticket, 't', now)
	if err != nil || p.customer != customer {
		return Status{}, fault.New(fault.NotFound, "no such waiting-room ticket (it may have expired: ask again)")
	}
	per, err := rm.admitRate(ctx, p.flight)
	if err != nil {
		return Status{}, err
	}
	if per == 0 || !rm.on {
		// The room is off (or not enforced): holds need no token now, but
		// the caller asked for one, so give it.
		return rm.admit(p, now), nil
	}
	if !rm.r.Usable() {
		return Status{}, Overloaded("the waiting room is unavailable; try again shortly")
	}
	res, err := roomFront.Run(ctx, rm.r.Cmd, []string{rm.stateKey(p.flight), rm.spentKey(p.flight, p.seq)},
		now.UnixMilli(), per).Int64Slice()
	if err != nil {
		rm.r.Fail("waiting_room", err)
		return Status{}, Overloaded("the waiting room is unavailable; try again shortly")
	}
	rm.r.OK()
	if res[1] == 1 {
		return Status{}, fault.New(fault.NotFound, "this ticket was used for a hold: ask again to queue for another")
	}
	if pos := p.seq - res[0]; pos > 0 {
		return Status{Position: pos}, nil
	}
	return rm.admit(p, now), nil
}

// admit returns an admission token for ticket p, valid for the token
// lifetime but never past the ticket's own expiry.
func (rm *Room) admit(p pass, now time.Time) Status {
	exp := now.Add(rm.token)
	if exp.After(p.expires) {
		exp = p.expires
	}
	tok := rm.sign(pass{kind: 'a', flight: p.flight, customer: p.customer, seq: p.seq, expires: exp})
	return Status{Admitted: true, Token: tok, ExpiresAt: exp}
}

// admission is a token being spent by one hold.
type admission struct {
	flight, customer, seq int64
	value                 string
	local                 bool // claimed in process (Redis was unreachable)
}

// queue answers 429 waiting_room with the customer's ticket.
func (rm *Room) queue(ctx context.Context, flight, customer int64, per int, now time.Time) error {
	if !rm.r.Usable() {
		return rm.fallbackAdmit(flight, per)
	}
	if t, ok := rm.recall(flight, customer, per, now); ok {
		front := t.front + now.Sub(t.at).Milliseconds()*int64(per)/1000
		return rm.queued(flight, t.seq, front, t.ticket, per)
	}
	exp := now.Add(rm.ticket)
	res, err := roomTicket.Run(ctx, rm.r.Cmd, []string{rm.stateKey(flight), rm.customerKey(flight, customer)},
		now.UnixMilli(), per, rm.ticket.Milliseconds(), exp.UnixMilli()).Int64Slice()
	if err != nil {
		rm.r.Fail("waiting_room", err)
		return rm.fallbackAdmit(flight, per)
	}
	rm.r.OK()
	seq, front := res[0], res[1]
	ticket := rm.sign(pass{kind: 't', flight: flight, customer: customer, seq: seq, expires: time.UnixMilli(res[2])})
	rm.remember(flight, customer, issuedTicket{seq: seq, ticket: ticket, front: front, per: per, at: now})
	return rm.queued(flight, seq, front, ticket, per)
}

// queued is the 429 waiting_room answer for ticket number seq.
func (rm *Room) queued(flight, seq, front int64, ticket string, per int) error {
	pos := max(0, seq-front)
	rm.m.turnedAway.WithLabelValues("waiting_room").Inc()
	place := fmt.Sprintf("you are number %d in the queue", pos)
	if pos == 0 {
		// The frontier passed the ticket as it was issued (a slow queue
		// that has drained): nobody is ahead, the token is there for the asking.
		place = "your turn has come"
	}
	e := fault.New(fault.WaitingRoom, "flight %d is in high demand: %s; "+
		"ask GET /waiting-room/{ticket} for your admission token", flight, place)
	e.RetryAfter = max(time.Second, time.Duration(pos)*time.Second/time.Duration(per))
	e.Extra = map[string]any{"ticket": ticket, "position": pos}
	return e
}

// recall returns the ticket handed out here to customer for flight within
// recallFor of now, at the same rate.
func (rm *Room) recall(flight, customer int64, per int, now time.Time) (issuedTicket, bool) {
	rm.issuedMu.Lock()
	defer rm.issuedMu.Unlock()
	t, ok := rm.issued[issuedKey{flight, customer}]
	if !ok || t.per != per || now.Before(t.at) || now.Sub(t.at) >= recallFor {
		return issuedTicket{}, false
	}
	return t, true
}

func (rm *Room) remember(flight, customer int64, t issuedTicket) {
	rm.issuedMu.Lock()
	defer rm.issuedMu.Unlock()
	if len(rm.issued) >= maxLocalKeys {
		clear(rm.issued)
	}
	rm.issued[issuedKey{flight, customer}] = t
}

// forget drops the ticket remembered for customer on flight: it was spent.
func (rm *Room) forget(flight, customer int64) {
	rm.issuedMu.Lock()
	defer rm.issuedMu.Unlock()
	delete(rm.issued, issuedKey{flight, customer})
}

// fallbackAdmit admits up to per holds a second (of the injected clock) in
// this process while Redis is unreachable (no queue can be kept across processes then); the rest
// are told to come back.
func (rm *Room) fallbackAdmit(flight int64, per int) error {
	rm.m.fallback.WithLabelValues("waiting_room").Inc()
	rm.fbMu.Lock()
	lim, ok := rm.fallback[flight]
	if !ok || lim.Limit() != rate.Limit(per) {
		if len(rm.fallback) >= maxLocalKeys {
			clear(rm.fallback)
		}
		lim = rate.NewLimiter(rate.Limit(per), per)
		rm.fallback[flight] = lim
	}
	rm.fbMu.Unlock()
	// The injected clock, as for the frontier.
	if lim.AllowN(rm.clock.Now(), 1) {
		rm.m.admitted.WithLabelValues("waiting_room_fallback").Inc()
		return nil
	}
	rm.m.turnedAway.WithLabelValues("waiting_room").Inc()
	return Overloaded("flight %d is in high demand and the waiting room is unavailable; try again shortly", flight)
}

// errSpent is claim's answer for an admission already used (or being used
// by a concurrent request).
var errSpent = errors.New("admission already used")

// claim marks p's ticket number as being spent, so no other request can
// use an admission for it at the same time or later. Returns errSpent when
// one did.
func (rm *Room) claim(ctx context.Context, p pass) (*admission, error) {
	a := &admission{flight: p.flight, customer: p.customer, seq: p.seq, value: nonce()}
	key := rm.spentKey(p.flight, p.seq)
	if rm.r.Usable() {
		ok, err := rm.r.Cmd.SetNX(ctx, key, a.value, rm.ticket).Result()
		if err == nil {
			rm.r.OK()
			if !ok {
				rm.m.turnedAway.WithLabelValues("waiting_room_spent").Inc()
				return nil, errSpent
			}
			rm.m.admitted.WithLabelValues("waiting_room").Inc()
			return a, nil
		}
		rm.r.Fail("waiting_room_claim", err)
	}
	// Without Redis, tokens spent through this process are remembered here.
	rm.m.fallback.WithLabelValues("waiting_room").Inc()
	now := time.Now()
	rm.spentMu.Lock()
	defer rm.spentMu.Unlock()
	if exp, ok := rm.spent[key]; ok && now.Before(exp) {
		return nil, errSpent
	}
	if len(rm.spent) >= maxLocalKeys {
		for k, exp := range rm.spent {
			if !now.Before(exp) {
				delete(rm.spent, k)
			}
		}
	}
	rm.spent[key] = now.Add(rm.token)
	a.local = true
	rm.m.admitted.WithLabelValues("waiting_room").Inc()
	return a, nil
}

// done finishes an admission: spent for good when the hold succeeded (and
// the customer's ticket dropped, so the next hold queues again), released
// for another try when it failed.
func (rm *Room) done(ctx context.Context, a *admission, held bool) {
	if a == nil {
		return
	}
	key := rm.spentKey(a.flight, a.seq)
	if held {
		rm.forget(a.flight, a.customer)
	}
	if a.local {
		if !held {
			rm.spentMu.Lock()
			delete(rm.spent, key)
			rm.spentMu.Unlock()
		}
		return
	}
	if !rm.r.Usable() {
		return
	}
	var err error
	if held {
		err = roomSpent.Run(ctx, rm.r.Cmd, []string{key, rm.customerKey(a.flight, a.customer)},
			strconv.FormatInt(a.seq, 10)).Err()
	} else {
		err = gateRelease.Run(ctx, rm.r.Cmd, []string{key}, a.value).Err()
	}
	if err != nil {
		rm.r.Fail("waiting_room_done", err)
		return
	}
	rm.r.OK()
}
