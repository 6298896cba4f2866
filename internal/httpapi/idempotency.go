package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/pg"
)

// Idempotency keys (docs/api.md; the IETF Idempotency-Key draft and Stripe's
// practice). A POST that carries the header runs once per caller and key:
// its first final answer is stored and replayed to every repeat of the same
// request for 24 hours. The database decides who runs a key: the first
// INSERT of (caller, key) wins, a concurrent one waits on the unique index
// for it to commit and then answers 409 idempotency_key_in_use (docs/invariants.md
// race 3), never a 500.
const (
	idempotencyHeader = "Idempotency-Key"
	// keyTTL is how long an answer is kept and replayed.
	keyTTL = 24 * time.Hour
	// keyLease is how long a running request keeps its key: a process that
	// died mid-request lets a retry take over after it. The request's own
	// work is bounded below it, so a live owner never outlasts its lease.
	keyLease    = time.Minute
	keyWorkTime = keyLease - 10*time.Second
)

// replayedHeaders are the headers of an answer that are stored and replayed
// with it.
var replayedHeaders = []string{"Content-Type", "Location", "Cache-Control"}

// keyedRequest identifies a request under an idempotency key.
type keyedRequest struct {
	caller       int64
	key          string
	method, path string
	hash         []byte
}

// storedAnswer is a final answer kept for replay.
type storedAnswer struct {
	Status  int
	Headers map[string]string
	Body    []byte
}

// idempotent runs h at most once per caller and Idempotency-Key. Without
// the header, h runs as usual (or, with KeyRequired, the request is
// refused with 400 invalid_request). With it:
//
//   - a key that is not 1–255 printable ASCII characters is 400;
//   - the first request runs h; its answer is stored when it is final (not
//     a 5xx or a 429) and the key released otherwise, so a retry runs again;
//   - a repeat with the same method, path and body gets the stored answer,
//     with Idempotent-Replayed: true;
//   - a repeat while the first still runs gets 409 idempotency_key_in_use;
//   - a different method, path or body gets 422 idempotency_key_reused.
//
// Keys belong to the caller: another caller's identical key is another key.
func (s *Server) idempotent(mode Idempotency, h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
		values := r.Header.Values(idempotencyHeader)
		if len(values) == 0 {
			if mode == KeyRequired {
				return fault.New(fault.InvalidRequest, "the %s header is required", idempotencyHeader)
			}
			return h(w, r, c)
		}
		if len(values) > 1 || !validKey(values[0]) {
			return fault.New(fault.InvalidRequest, "%s must be one value of 1 to 255 printable ASCII characters", idempotencyHeader)
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			return decodeError(err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		q := keyedRequest{caller: c.ID, key: values[0], method: r.Method, path: r.URL.Path, hash: sha256Sum(body)}

		lease, stored, err := s.claimKey(r.Context(), q, c)
		if err != nil {
			return err
		}
		if stored != nil {
			stored.write(w, true)
			return nil
		}
		// This request owns the key. It runs to the end even if the client
		// goes away, so that the retry finds its answer, within its lease.
		// Its transactions record what they made under the key
		// (pg.RecordEffect), so that a key whose effect committed is never
		// run again, even if its answer below is lost.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), keyWorkTime)
		defer cancel()
		ctx = pg.WithKeyClaim(ctx, pg.KeyClaim{CallerID: q.caller, Key: q.key, Lease: lease})
		r = r.WithContext(ctx)
		buf := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
		done := false
		defer func() {
			if !done { // h panicked: free the key for a retry
				s.settleKey(q, lease, nil)
			}
		}()
		if err := h(buf, r, c); err != nil {
			s.writeError(buf, r, err)
		}
		done = true
		answer := buf.answer()
		if !finalStatus(answer.Status) {
			s.settleKey(q, lease, nil)
		} else {
			s.settleKey(q, lease, &answer)
		}
		answer.write(w, false)
		return nil
	}
}

func sha256Sum(b []byte) []byte {
	sum := sha256.Sum256(b)
	return sum[:]
}

// validKey reports whether k is 1–255 printable ASCII characters.
func validKey(k string) bool {
	if len(k) < 1 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// finalStatus reports whether an answer is the request's outcome, to be
// replayed, rather than a transient state that a retry may change.
func finalStatus(status int) bool {
	return status < 500 && status != http.StatusTooManyRequests && status != 499
}

// claimKey makes this request the owner of its key and returns its lease,
// or returns the stored answer to replay, or a fault: 422 for a different
// request under the key, 409 while its first request runs. A key whose
// request committed its effect but whose answer was lost is never run
// again: once its lease is over, the answer is made from the effect.
func (s *Server) claimKey(ctx context.Context, q keyedRequest, c auth.Caller) (string, *storedAnswer, error) {
	// A row may vanish between the INSERT and the SELECT (its request ended
	// without a final answer): then try again, a bounded number of times.
	for range 3 {
		now := s.Clock.Now()
		var lease string
		// The first INSERT wins. A row whose 24 hours are over is taken over
		// by any request; a row whose owner died (lease over, no answer) by
		// the same request only.
		err := s.Pool.QueryRow(ctx, `INSERT INTO idempotency_key AS k
				(caller_id, idem_key, method, path, request_hash, lease, locked_until, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, gen_random_uuid(), $7, $6, $8)
			ON CONFLICT (caller_id, idem_key) DO UPDATE SET
				method = EXCLUDED.method, path = EXCLUDED.path, request_hash = EXCLUDED.request_hash,
				lease = EXCLUDED.lease, locked_until = EXCLUDED.locked_until,
				response_status = NULL, response_headers = NULL, response_body = NULL, effect = NULL,
				created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
			WHERE k.expires_at <= $6
			   OR (k.response_status IS NULL AND k.locked_until <= $6 AND k.effect IS NULL
			       AND k.method = EXCLUDED.method AND k.path = EXCLUDED.path AND k.request_hash = EXCLUDED.request_hash)
			RETURNING lease::text`,
			q.caller, q.key, q.method, q.path, q.hash, now, now.Add(keyLease), now.Add(keyTTL)).Scan(&lease)
		if err == nil {
			return lease, nil, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return "", nil, fmt.Errorf("claim idempotency key: %w", err)
		}
		var (
			method, path string
			hash         []byte
			status       *int
			headers      map[string]string
			body         []byte
			effect       *string
			lockedUntil  *time.Time
		)
		err = s.Pool.QueryRow(ctx, `SELECT method, path, request_hash, response_status, response_headers, response_body,
				effect, locked_until
			FROM idempotency_key WHERE caller_id = $1 AND idem_key = $2`, q.caller, q.key).
			Scan(&method, &path, &hash, &status, &headers, &body, &effect, &lockedUntil)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("read idempotency key: %w", err)
		}
		if method != q.method || path != q.path || !bytes.Equal(hash, q.hash) {
			return "", nil, fault.New(fault.IdempotencyKeyReused,
				"this Idempotency-Key was used for a different request (%s %s or another body)", method, path)
		}
		if status == nil && effect != nil && lockedUntil != nil && !lockedUntil.After(now) {
			a, err := s.answerFromEffect(ctx, q, c, *effect)
			if err != nil {
				return "", nil, err
			}
			return "", a, nil
		}
		if status == nil {
			return "", nil, keyInUse()
		}
		return "", &storedAnswer{Status: *status, Headers: headers, Body: body}, nil
	}
	return "", nil, keyInUse()
}

// answerFromEffect makes and stores the answer of a key whose request
// committed effect but whose answer was lost: for a hold, 201 with the
// booking as it is now. A key whose effect names nothing it can answer
// from stays 409 idempotency_key_in_use: running it again could make the
// effect twice.
func (s *Server) answerFromEffect(ctx context.Context, q keyedRequest, c auth.Caller, effect string) (*storedAnswer, error) {
	id, ok := booking.EffectBooking(effect)
	if !ok || q.method != http.MethodPost || q.path != "/bookings" {
		return nil, keyInUse()
	}
	b, err := booking.Get(ctx, s.Pool, c, id, s.Clock.Now())
	if err != nil {
		return nil, fmt.Errorf("answer idempotency key from booking %d: %w", id, err)
	}
	buf := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
	buf.header.Set("Location", fmt.Sprintf("/bookings/%d", b.ID))
	writeJSON(buf, http.StatusCreated, b.View())
	a := buf.answer()
	headers, err := json.Marshal(a.Headers)
	if err != nil {
		return nil, fmt.Errorf("answer idempotency key: %w", err)
	}
	// Whoever stores it first wins; the answer is the same either way.
	if _, err := s.Pool.Exec(ctx, `UPDATE idempotency_key
			SET response_status = $4, response_headers = $5, response_body = $6, lease = NULL, locked_until = NULL
			WHERE caller_id = $1 AND idem_key = $2 AND effect = $3 AND response_status IS NULL`,
		q.caller, q.key, effect, a.Status, headers, a.Body); err != nil {
		return nil, fmt.Errorf("store the answer of idempotency key: %w", err)
	}
	s.log.Warn("idempotency key answered from its effect (its answer had been lost)", "caller", q.caller, "effect", effect)
	return &a, nil
}

func keyInUse() error {
	return &fault.Error{Code: fault.IdempotencyKeyInUse, RetryAfter: time.Second,
		Detail: "a request with this Idempotency-Key is still being processed; retry later"}
}

// settleFirst bounds the attempt made before the client is answered;
// settleTime bounds how long settleKey then keeps trying in the background,
// and settleRetry is the first pause between those attempts, doubled each
// time.
const (
	settleFirst = 2 * time.Second
	settleTime  = 30 * time.Second
	settleRetry = 50 * time.Millisecond
)

// settleKey stores the answer under the key, or, with a nil answer,
// releases the key so that a retry runs again; a key whose effect committed
// is not released but its lease ended, so that the retry is answered from
// the effect. It acts only while this request still holds the lease.
//
// It runs on a context of its own, free of the request's deadlines and of
// the connection-wait budget of load shedding. When its first attempt
// fails (the database is busy or away) the client is answered anyway and
// the key settled in the background, for a while: a key left leased would
// answer 409 until its lease ends. If that fails too, the effect recorded
// with the key keeps a retry from running the request again.
func (s *Server) settleKey(q keyedRequest, lease string, a *storedAnswer) {
	var headers []byte
	if a != nil {
		var err error
		if headers, err = json.Marshal(a.Headers); err != nil {
			s.log.Error("settle idempotency key", "caller", q.caller, "path", q.path, "err", err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleFirst)
	err := s.settleOnce(ctx, q, lease, a, headers)
	cancel()
	if err == nil {
		return
	}
	s.log.Warn("settle idempotency key: trying again in the background", "caller", q.caller, "path", q.path, "err", err)
	go s.settleLater(q, lease, a, headers)
}

func (s *Server) settleLater(q keyedRequest, lease string, a *storedAnswer, headers []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTime)
	defer cancel()
	pause := settleRetry
	for {
		select {
		case <-ctx.Done():
			s.log.Error("settle idempotency key: gave up", "caller", q.caller, "path", q.path)
			return
		case <-time.After(pause):
		}
		if err := s.settleOnce(ctx, q, lease, a, headers); err == nil {
			return
		}
		pause = min(2*pause, 2*time.Second)
	}
}

func (s *Server) settleOnce(ctx context.Context, q keyedRequest, lease string, a *storedAnswer, headers []byte) error {
	if a != nil {
		_, err := s.Pool.Exec(ctx, `UPDATE idempotency_key
			SET response_status = $4, response_headers = $5, response_body = $6, lease = NULL, locked_until = NULL
			WHERE caller_id = $1 AND idem_key = $2 AND lease = $3`,
			q.caller, q.key, lease, a.Status, headers, a.Body)
		return err
	}
	_, err := s.Pool.Exec(ctx, `WITH released AS (
			DELETE FROM idempotency_key WHERE caller_id = $1 AND idem_key = $2 AND lease = $3 AND effect IS NULL)
		UPDATE idempotency_key SET locked_until = $4
			WHERE caller_id = $1 AND idem_key = $2 AND lease = $3 AND effect IS NOT NULL`,
		q.caller, q.key, lease, s.Clock.Now())
	return err
}

// PurgeIdempotencyKeys deletes up to limit keys whose 24 hours are over and
// returns how many it deleted.
func (s *Server) PurgeIdempotencyKeys(ctx context.Context, limit int) (int64, error) {
	tag, err := s.Pool.Exec(ctx, `DELETE FROM idempotency_key WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM idempotency_key WHERE expires_at <= $1 LIMIT $2))`, s.Clock.Now(), limit)
	if err != nil {
		return 0, fmt.Errorf("purge idempotency keys: %w", err)
	}
	return tag.RowsAffected(), nil
}

// RunKeyJanitor purges expired idempotency keys every interval until ctx
// ends, in bounded batches.
func (s *Server) RunKeyJanitor(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for range 100 {
			passCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := s.PurgeIdempotencyKeys(passCtx, 1000)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					s.log.Error("purge idempotency keys", "err", err)
				}
				break
			}
			if n < 1000 {
				break
			}
		}
	}
}

// bufferedResponse holds a handler's answer until it is stored.
type bufferedResponse struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if !b.wrote {
		b.status, b.wrote = code, true
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.wrote = true
	return b.body.Write(p)
}

func (b *bufferedResponse) answer() storedAnswer {
	a := storedAnswer{Status: b.status, Headers: map[string]string{}, Body: b.body.Bytes()}
	for _, h := range replayedHeaders {
		if v := b.header.Get(h); v != "" {
			a.Headers[h] = v
		}
	}
	if v := b.header.Get("Retry-After"); v != "" {
		a.Headers["Retry-After"] = v // only on answers that are not stored
	}
	return a
}

func (a *storedAnswer) write(w http.ResponseWriter, replayed bool) {
	for k, v := range a.Headers {
		w.Header().Set(k, v)
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
}
