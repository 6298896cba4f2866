// Package idempotency keeps the answers of requests made under an
// Idempotency-Key (docs/api.md; the IETF Idempotency-Key draft and
// Stripe's practice): who runs a key, the answer stored for replay, and the
// janitor that deletes keys whose 24 hours are over. The HTTP middleware
// that reads the header and replays answers is in internal/httpapi.
//
// The database decides who runs a key: the first INSERT of (caller, key)
// wins, a concurrent one waits on the unique index for it to commit and
// then answers 409 idempotency_key_in_use (docs/invariants.md race 3),
// never a 500.
package idempotency

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/base"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
)

const (
	// TTL is how long an answer is kept and replayed.
	TTL = 24 * time.Hour
	// Lease is how long a running request keeps its key: a process that
	// died mid-request lets a retry take over after it. The request's own
	// work is bounded below it (WorkTime), so a live owner never outlasts
	// its lease.
	Lease    = time.Minute
	WorkTime = Lease - leaseMargin
	// ShortLease is the lease of a request whose work is bounded to 10 s
	// and which a retry may run again once it is over: a payment start,
	// which resumes its booking's one charge under the same gateway key,
	// whatever key it comes with, and records no effect to answer a retry
	// from (it is bounded as the money lane bounds it in all, its gateway
	// call included); and a hold (5 s in all), whose effect commits with
	// the hold, so that a retry finds the booking it made, and a hold
	// refused made nothing to make twice. A retry of a request whose
	// process died, or whose answer a database outage kept from being
	// stored, waits out this lease rather than a minute.
	ShortLease = 10*time.Second + leaseMargin
	// leaseMargin is how long a lease outlasts its request's work: to
	// store the answer (settleFirst), and for the clocks of processes
	// sharing the database.
	leaseMargin = 10 * time.Second
)

// Request identifies a request under an idempotency key.
type Request struct {
	Caller       int64
	Key          string
	Method, Path string
	Hash         []byte // SHA-256 of the body
	// Lease is how long the request keeps its key while it runs (Claim):
	// zero is Lease, ShortLease for a request idempotent by itself.
	Lease time.Duration
}

// LeaseTime is how long q keeps its key while it runs.
func (q Request) LeaseTime() time.Duration {
	if q.Lease > 0 {
		return q.Lease
	}
	return Lease
}

// WorkTime bounds q's own work, so that a live request never outlasts its
// lease.
func (q Request) WorkTime() time.Duration { return q.LeaseTime() - leaseMargin }

// NewRequest returns the request of caller under key, identified by its
// method, path and body.
func NewRequest(caller int64, key, method, path string, body []byte) Request {
	sum := sha256.Sum256(body)
	return Request{Caller: caller, Key: key, Method: method, Path: path, Hash: sum[:]}
}

// Answer is a final answer kept for replay.
type Answer struct {
	Status  int
	Headers map[string]string
	Body    []byte
}

// Store keeps idempotency keys in PostgreSQL.
type Store struct {
	pool  *pgxpool.Pool
	clock clock.Clock
	log   *slog.Logger
}

// New returns the store of keys in pool, on b's clock and logger.
func New(b base.Archetype, pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, clock: b.Clock, log: b.Log}
}

// FromEffect makes the answer of a key whose request committed effect
// (with the booking it made) but has not stored its answer, or returns a fault, such as
// KeyInUse, when it cannot answer from that effect.
type FromEffect func(ctx context.Context, effect string) (*Answer, error)

// The statements of a request under a key, one constant each so that a
// warm-up (Warm) runs exactly what requests run.
//
// The claim and the answer commit without waiting for the write-ahead log
// to reach the disk (synchronous_commit off, for their own transaction
// only: set_config's third argument). Neither needs to: the log is written
// in order, so the request's effect, whose transaction does wait, makes
// the claim before it durable too (on a synchronous replica as well); and
// an answer lost in a crash of PostgreSQL or a failover (within a fraction
// of a second of its commit) leaves the key as an answer that could not be
// stored does (Settle): a key whose effect committed is answered from that
// effect, and one without an effect runs again. It saves every request
// with a key two waits for the disk, which all commits queue for: with
// pgbench, 8 clients each claiming and answering keys, 49–77 % more of
// them a second (docs/surge.md).
const (
	// claimSQL: the first INSERT wins. A row whose 24 hours are over is
	// taken over by any request; a row whose owner died (lease over, no
	// answer) by the same request only.
	claimSQL = `INSERT INTO idempotency_key AS k
			(caller_id, idem_key, method, path, request_hash, lease, locked_until, created_at, expires_at)
		SELECT $1, $2, $3, $4, $5, gen_random_uuid(), $7, $6, $8
		WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL
		ON CONFLICT (caller_id, idem_key) DO UPDATE SET
			method = EXCLUDED.method, path = EXCLUDED.path, request_hash = EXCLUDED.request_hash,
			lease = EXCLUDED.lease, locked_until = EXCLUDED.locked_until,
			response_status = NULL, response_headers = NULL, response_body = NULL, effect = NULL,
			created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
		WHERE k.expires_at <= $6
		   OR (k.response_status IS NULL AND k.locked_until <= $6 AND k.effect IS NULL
		       AND k.method = EXCLUDED.method AND k.path = EXCLUDED.path AND k.request_hash = EXCLUDED.request_hash)
		RETURNING lease::text`
	// readSQL reads a key its request could not claim.
	readSQL = `SELECT method, path, request_hash, response_status, response_headers, response_body,
			effect, locked_until
		FROM idempotency_key WHERE caller_id = $1 AND idem_key = $2`
	// answerSQL stores the answer of the request holding the lease.
	answerSQL = `UPDATE idempotency_key
		SET response_status = $4, response_headers = $5, response_body = $6, lease = NULL, locked_until = NULL
		WHERE caller_id = $1 AND idem_key = $2 AND lease = $3
		  AND set_config('synchronous_commit', 'off', true) IS NOT NULL`

	// claimPendingSQL claims the pending keys of a batch of holds in the
	// hold's own transaction, just before it (QueueClaims), so it commits
	// as the hold does (it does not turn synchronous_commit off). The
	// first INSERT wins; a key already in the table, whatever its state,
	// is left as it is, and its request is handled as one under a claimed
	// key (Claim). Keys are inserted in key order, so that two batches
	// never wait for each other's keys crosswise.
	claimPendingSQL = `INSERT INTO idempotency_key
			(caller_id, idem_key, method, path, request_hash, lease, locked_until, created_at, expires_at)
		SELECT u.caller, u.idem, u.method, u.path, u.hash, u.lease::uuid, $7, $6, $8
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bytea[], $9::text[])
			AS u(caller, idem, method, path, hash, lease)
		ORDER BY u.caller, u.idem
		ON CONFLICT (caller_id, idem_key) DO NOTHING`
	// answerNewSQL stores the final answer of a request whose pending key
	// no statement of its own claimed (it was answered before it reached
	// the database, or its statement was rolled back) as a new key, unless
	// the key is already there: another request's.
	answerNewSQL = `INSERT INTO idempotency_key
			(caller_id, idem_key, method, path, request_hash, response_status, response_headers, response_body,
			 created_at, expires_at)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10
		WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL
		ON CONFLICT (caller_id, idem_key) DO NOTHING`
)

// NewLease returns a new lease for a pending claim: a random UUID.
func NewLease() string {
	var b [16]byte
	_, _ = rand.Read(b[:])  // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// QueueClaims queues in b the claim of the pending keys among claims at
// now (claimPendingSQL), and marks them sent. Queued before a hold in the
// same batch, it runs in the hold's transaction: the hold function finds
// a key it claimed as it finds one claimed before (Claim), and refuses the
// request of one it could not claim (pg.KeyClaim.Lost).
func QueueClaims(b *pgx.Batch, claims []pg.KeyClaim, now time.Time) {
	var (
		callers       []int64
		keys, methods []string
		paths, leases []string
		hashes        [][]byte
	)
	for _, c := range claims {
		if p := c.Pending; p != nil {
			callers, keys, leases = append(callers, c.CallerID), append(keys, c.Key), append(leases, c.Lease)
			methods, paths, hashes = append(methods, p.Method), append(paths, p.Path), append(hashes, p.Hash)
			p.MarkSent()
		}
	}
	if len(callers) > 0 {
		// Pending claims are holds' (a route that claimsKeyInHold), whose
		// lease is ShortLease.
		b.Queue(claimPendingSQL, callers, keys, methods, paths, hashes, now, now.Add(ShortLease), now.Add(TTL), leases)
	}
}

// Pending returns the claim of q under a new lease, pending: the statement
// that makes the request's effect claims the key (QueueClaims).
func Pending(q Request) pg.KeyClaim {
	return pg.KeyClaim{CallerID: q.Caller, Key: q.Key, Lease: NewLease(),
		Pending: &pg.PendingClaim{Method: q.Method, Path: q.Path, Hash: q.Hash}}
}

// AnswerPending stores answer a of q, whose key c was pending, and reports
// false when another request has the key: the answer was not stored, and q
// is to be handled as a request under a claimed key (Claim). The answer
// goes on the request's own row when a statement claiming the key was sent
// and committed (answerSQL), else on a new row (answerNewSQL). It tries
// once, within settleFirst and by the request's deadline (by; zero: none);
// when that fails, a key the request may hold is settled in the background
// (Settle), and one it never sent a claim for is left unclaimed: the
// request made nothing, and a retry runs it again.
func (s *Store) AnswerPending(q Request, c pg.KeyClaim, a *Answer, by time.Time) bool {
	headers, err := json.Marshal(a.Headers)
	if err != nil {
		s.log.Error("answer idempotency key", "caller", q.Caller, "path", q.Path, "err", err)
		return true
	}
	ctx, cancel := firstAttempt(by)
	defer cancel()
	if c.Pending.Sent() {
		stored, err := answerKey(ctx, s.pool, q, c.Lease, a.Status, headers, a.Body)
		if err != nil {
			s.log.Warn("settle idempotency key: trying again in the background", "caller", q.Caller, "path", q.Path, "err", err)
			go s.settleLater(q, c.Lease, a, headers)
			return true
		}
		if stored {
			return true
		}
		// The claim's transaction was rolled back, or did not take the key.
	}
	stored, err := answerNewKey(ctx, s.pool, q, a.Status, headers, a.Body, s.clock.Now())
	if err != nil {
		s.log.Warn("answer idempotency key", "caller", q.Caller, "path", q.Path, "err", err)
		return true
	}
	return stored
}

// Exists reports whether q's key is in the table, in any state.
func (s *Store) Exists(ctx context.Context, q Request) (bool, error) {
	_, err := readKey(ctx, s.pool, q)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// Claim makes this request the owner of its key and returns its lease,
// or returns the stored answer to replay, or a fault: 422 for a different
// request under the key, 409 while its first request runs. A key whose
// request committed its effect but whose answer was lost is never run
// again: once its lease is over, the answer is made by fromEffect and
// stored.
func (s *Store) Claim(ctx context.Context, q Request, fromEffect FromEffect) (string, *Answer, error) {
	// A row may vanish between the INSERT and the SELECT (its request ended
	// without a final answer): then try again, a bounded number of times.
	for range 3 {
		now := s.clock.Now()
		lease, err := claimKey(ctx, s.pool, q, now)
		if err == nil {
			return lease, nil, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return "", nil, fmt.Errorf("claim idempotency key: %w", err)
		}
		k, err := readKey(ctx, s.pool, q)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("read idempotency key: %w", err)
		}
		if k.method != q.Method || k.path != q.Path || !bytes.Equal(k.hash, q.Hash) {
			return "", nil, fault.New(fault.IdempotencyKeyReused,
				"this Idempotency-Key was used for a different request (%s %s or another body)", k.method, k.path)
		}
		// A committed effect is the request's outcome, whether its request
		// is still about to answer or died first (its lease then runs on):
		// the retry is answered from it at once, not after the lease.
		if k.status == nil && k.effect != nil {
			lost := k.lockedUntil == nil || !k.lockedUntil.After(now)
			a, err := s.answerFromEffect(ctx, q, *k.effect, fromEffect, lost)
			if err != nil {
				return "", nil, err
			}
			return "", a, nil
		}
		if k.status == nil {
			return "", nil, KeyInUse()
		}
		return "", &Answer{Status: *k.status, Headers: k.headers, Body: k.body}, nil
	}
	return "", nil, KeyInUse()
}

// querier is a pool or a transaction.
type querier interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}

// answerKey stores the answer (status, headers marshalled, body) of q's
// key while lease holds it (answerSQL), and reports whether it did.
func answerKey(ctx context.Context, db querier, q Request, lease string, status int, headers, body []byte) (bool, error) {
	tag, err := db.Exec(ctx, answerSQL, q.Caller, q.Key, lease, status, headers, body)
	return tag.RowsAffected() == 1, err
}

// answerNewKey stores the answer of q as a new key at now (answerNewSQL),
// and reports whether it did: false when the key is already there.
func answerNewKey(ctx context.Context, db querier, q Request, status int, headers, body []byte, now time.Time) (bool, error) {
	tag, err := db.Exec(ctx, answerNewSQL, q.Caller, q.Key, q.Method, q.Path, q.Hash, status, headers, body, now, now.Add(TTL))
	return tag.RowsAffected() == 1, err
}

// claimKey claims q's key at now (claimSQL) and returns the lease; a key
// it could not claim is pgx.ErrNoRows.
func claimKey(ctx context.Context, db querier, q Request, now time.Time) (string, error) {
	var lease string
	err := db.QueryRow(ctx, claimSQL, q.Caller, q.Key, q.Method, q.Path, q.Hash, now, now.Add(q.LeaseTime()), now.Add(TTL)).Scan(&lease)
	return lease, err
}

// keyRow is a key's row as readSQL reads it.
type keyRow struct {
	method, path string
	hash         []byte
	status       *int
	headers      map[string]string
	body         []byte
	effect       *string
	lockedUntil  *time.Time
}

// readKey reads q's key (readSQL) with db, a pool or a transaction.
func readKey(ctx context.Context, db querier, q Request) (keyRow, error) {
	var k keyRow
	err := db.QueryRow(ctx, readSQL, q.Caller, q.Key).
		Scan(&k.method, &k.path, &k.hash, &k.status, &k.headers, &k.body, &k.effect, &k.lockedUntil)
	return k, err
}

// answerFromEffect makes the answer of a key whose request committed effect
// but has not stored its answer (lost: its lease ran out, so it never
// will), and stores it.
func (s *Store) answerFromEffect(ctx context.Context, q Request, effect string, fromEffect FromEffect, lost bool) (*Answer, error) {
	a, err := fromEffect(ctx, effect)
	if err != nil {
		return nil, err
	}
	headers, err := json.Marshal(a.Headers)
	if err != nil {
		return nil, fmt.Errorf("answer idempotency key: %w", err)
	}
	// Whoever stores it first wins; the answer is the same either way.
	if _, err := s.pool.Exec(ctx, `UPDATE idempotency_key
			SET response_status = $4, response_headers = $5, response_body = $6, lease = NULL, locked_until = NULL
			WHERE caller_id = $1 AND idem_key = $2 AND effect = $3 AND response_status IS NULL`,
		q.Caller, q.Key, effect, a.Status, headers, a.Body); err != nil {
		return nil, fmt.Errorf("store the answer of idempotency key: %w", err)
	}
	if lost {
		s.log.Warn("idempotency key answered from its effect (its answer had been lost)", "caller", q.Caller, "effect", effect)
	}
	return a, nil
}

// KeyInUse is the fault of a key whose first request still runs.
func KeyInUse() error {
	return &fault.Error{Code: fault.IdempotencyKeyInUse, RetryAfter: time.Second,
		Detail: "a request with this Idempotency-Key is still being processed; retry later"}
}

// settleFirst bounds the attempt made before the client is answered;
// settleTime bounds how long Settle then keeps trying in the background,
// and settleRetry is the first pause between those attempts, doubled each
// time.
const (
	settleFirst = 2 * time.Second
	settleTime  = 30 * time.Second
	settleRetry = 50 * time.Millisecond
)

// Settle stores the answer under the key, or, with a nil answer, releases
// the key so that a retry runs again; a key whose effect committed is not
// released but its lease ended, so that the retry is answered from the
// effect. It acts only while this request still holds the lease.
//
// It runs on a context of its own, free of the connection-wait budget of
// load shedding. Its first attempt, made before the client is answered,
// ends within settleFirst and by the request's deadline (by; zero: none),
// so that a request is answered within its lane's bound in all. When that
// attempt fails (the database is busy or away, or the request's time is
// up) the client is answered anyway and the key settled in the
// background, for a while: a key left leased would answer 409 until its
// lease ends. If that fails too, the effect recorded with the key keeps a
// retry from running the request again.
func (s *Store) Settle(q Request, lease string, a *Answer, by time.Time) {
	var headers []byte
	if a != nil {
		var err error
		if headers, err = json.Marshal(a.Headers); err != nil {
			s.log.Error("settle idempotency key", "caller", q.Caller, "path", q.Path, "err", err)
			return
		}
	}
	ctx, cancel := firstAttempt(by)
	err := s.settleOnce(ctx, q, lease, a, headers)
	cancel()
	if err == nil {
		return
	}
	s.log.Warn("settle idempotency key: trying again in the background", "caller", q.Caller, "path", q.Path, "err", err)
	go s.settleLater(q, lease, a, headers)
}

// firstAttempt is the context of the attempt to store an answer made
// before the client is answered: within settleFirst, and by the request's
// deadline (by; zero: none).
func firstAttempt(by time.Time) (context.Context, context.CancelFunc) {
	first := time.Now().Add(settleFirst)
	if !by.IsZero() && by.Before(first) {
		first = by
	}
	return context.WithDeadline(context.Background(), first)
}

func (s *Store) settleLater(q Request, lease string, a *Answer, headers []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTime)
	defer cancel()
	pause := settleRetry
	for {
		select {
		case <-ctx.Done():
			s.log.Error("settle idempotency key: gave up", "caller", q.Caller, "path", q.Path)
			return
		case <-time.After(pause):
		}
		if err := s.settleOnce(ctx, q, lease, a, headers); err == nil {
			return
		}
		pause = min(2*pause, 2*time.Second)
	}
}

func (s *Store) settleOnce(ctx context.Context, q Request, lease string, a *Answer, headers []byte) error {
	if a != nil {
		_, err := answerKey(ctx, s.pool, q, lease, a.Status, headers, a.Body)
		return err
	}
	_, err := s.pool.Exec(ctx, `WITH released AS (
			DELETE FROM idempotency_key WHERE caller_id = $1 AND idem_key = $2 AND lease = $3 AND effect IS NULL)
		UPDATE idempotency_key SET locked_until = $4
			WHERE caller_id = $1 AND idem_key = $2 AND lease = $3 AND effect IS NOT NULL`,
		q.Caller, q.Key, lease, s.clock.Now())
	return err
}

// Purge deletes up to limit keys whose 24 hours are over and returns how
// many it deleted.
func (s *Store) Purge(ctx context.Context, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM idempotency_key WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM idempotency_key WHERE expires_at <= $1 LIMIT $2))`, s.clock.Now(), limit)
	if err != nil {
		return 0, fmt.Errorf("purge idempotency keys: %w", err)
	}
	return tag.RowsAffected(), nil
}

// RunJanitor purges expired keys every interval until ctx ends, in bounded
// batches.
func (s *Store) RunJanitor(ctx context.Context, interval time.Duration) {
	clock.Every(ctx, interval, func() {
		for range 100 {
			passCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := s.Purge(passCtx, 1000)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					s.log.Error("purge idempotency keys", "err", err)
				}
				return
			}
			if n < 1000 {
				return
			}
		}
	})
}
