package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/booking"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/idempotency"
	"berth.dev/berth/internal/pg"
)

// Idempotency keys (docs/api.md): the middleware that reads the
// Idempotency-Key header and replays answers. The keys themselves, who runs
// one and what is stored, are internal/idempotency's.
const idempotencyHeader = "Idempotency-Key"

// replayedHeaders are the headers of an answer that are stored and replayed
// with it.
var replayedHeaders = []string{"Content-Type", "Location", "Cache-Control"}

// idempotent runs h at most once per caller and Idempotency-Key. Without
// the header, h runs as usual (or, with KeyRequired, the request is
// refused with 400 invalid_request). With it:
//
//   - a key that is not 1–255 printable ASCII characters is 400;
//   - the first request runs h; its answer is stored when it is final (not
//     a 5xx, a 429, or a 400 or 422 refusing the request as written) and
//     the key released otherwise, so a retry runs again;
//   - a repeat with the same method, path and body gets the stored answer,
//     with Idempotent-Replayed: true;
//   - a repeat while the first still runs gets 409 idempotency_key_in_use;
//   - a different method, path or body gets 422 idempotency_key_reused.
//
// Keys belong to the caller: another caller's identical key is another key.
//
// With inEffect (a route whose only effect is a hold sent through
// booking.QueryHold), the key is claimed by the hold itself, in its round
// trip and commit (runPending), instead of before h runs (runClaimed).
// lease, when not zero, is how long a request keeps its key while it runs
// (idempotency.Request.Lease), and bounds its work.
func (s *Server) idempotent(mode Idempotency, inEffect bool, lease time.Duration, h handlerFunc) handlerFunc {
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
		body, err := readBody(w, r)
		if err != nil {
			return err
		}
		q := idempotency.NewRequest(c.ID, values[0], r.Method, r.URL.Path, body)
		q.Lease = lease
		if inEffect {
			return s.runPending(w, r, c, q, body, h)
		}
		return s.runClaimed(w, r, c, q, body, h)
	}
}

// runClaimed claims q's key, then runs h as its owner (or replays the
// stored answer, or refuses), and stores h's answer or releases the key.
func (s *Server) runClaimed(w http.ResponseWriter, r *http.Request, c auth.Caller, q idempotency.Request, body []byte, h handlerFunc) error {
	lease, stored, err := s.Keys.Claim(r.Context(), q, s.answerFromEffect(q, c))
	if err != nil {
		return err
	}
	if stored != nil {
		writeAnswer(w, stored, true)
		return nil
	}
	claim := pg.KeyClaim{CallerID: q.Caller, Key: q.Key, Lease: lease}
	answer, by, _ := s.runUnder(r, c, body, q, claim, h, func(by time.Time) { s.Keys.Settle(q, lease, nil, by) })
	if !finalStatus(answer.Status) {
		s.Keys.Settle(q, lease, nil, by)
	} else {
		s.Keys.Settle(q, lease, &answer, by)
	}
	writeAnswer(w, &answer, false)
	return nil
}

// runPending runs h under q's key before claiming it: the hold h sends
// claims it in its own transaction (idempotency.QueueClaims), so that a
// hold under a new key, the usual case, costs one round trip and one
// commit for both, and one more for its answer. Where the key turns out to
// be another request's (the hold found it claimed, or storing an answer
// found it taken), the request made nothing, and it is run again as one
// under a claimed key (runClaimed): replayed, refused with 409 or 422, or
// run. A non-final answer before any claim was sent is checked against the
// key, so that a retry of an answered request gets its answer rather than
// the 429 of, say, a spent admission; except a 503: a shed request costs
// the database nothing, and its retry gets the answer later.
func (s *Server) runPending(w http.ResponseWriter, r *http.Request, c auth.Caller, q idempotency.Request, body []byte, h handlerFunc) error {
	claim := idempotency.Pending(q)
	release := func(by time.Time) {
		if claim.Pending.Sent() {
			s.Keys.Settle(q, claim.Lease, nil, by)
		}
	}
	answer, by, err := s.runUnder(r, c, body, q, claim, h, release)
	switch {
	case errors.Is(err, pg.ErrKeyClaimed):
	case finalStatus(answer.Status):
		if s.Keys.AnswerPending(q, claim, &answer, by) {
			writeAnswer(w, &answer, false)
			return nil
		}
	case claim.Pending.Sent() || answer.Status == http.StatusServiceUnavailable:
		release(by)
		writeAnswer(w, &answer, false)
		return nil
	default:
		if !s.keyTaken(r.Context(), q) {
			writeAnswer(w, &answer, false)
			return nil
		}
	}
	return s.runClaimed(w, r, c, q, body, h)
}

// keyTaken reports whether q's key is in the table; false, logged, when it
// cannot tell: the request's own answer is then the one given.
func (s *Server) keyTaken(ctx context.Context, q idempotency.Request) bool {
	taken, err := s.Keys.Exists(ctx, q)
	if err != nil {
		s.log.Warn("idempotency key: could not check for an earlier request", "caller", q.Caller, "err", err)
	}
	return taken
}

// runUnder runs h on r with body, request q, under claim, and returns its answer, the
// request's deadline (zero: none) and h's error (already in the answer).
// The request runs to the end even if the client goes away, so that the
// retry finds its answer, within its lease and within the request's own
// deadline (its lane's "in all" bound), which a client leaving does not
// lift. Its transactions record what they made under the key
// (pg.KeyClaimOf), so that a key whose effect committed is never run
// again, even if its answer is lost. If h panics, release is called before
// the panic goes on.
func (s *Server) runUnder(r *http.Request, c auth.Caller, body []byte, q idempotency.Request, claim pg.KeyClaim, h handlerFunc, release func(by time.Time)) (idempotency.Answer, time.Time, error) {
	by, _ := r.Context().Deadline()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), q.WorkTime())
	defer cancel()
	if !by.IsZero() {
		var cancelBy context.CancelFunc
		ctx, cancelBy = context.WithDeadline(ctx, by)
		defer cancelBy()
	}
	r = r.WithContext(pg.WithKeyClaim(ctx, claim))
	buf := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
	done := false
	defer func() {
		if !done { // h panicked: free the key for a retry
			release(by)
		}
	}()
	err := h(buf, r, c)
	// A pending key found claimed is no failure: the request made nothing
	// and runPending runs it again under the claimed key, so its answer is
	// never written (nor logged as an internal error).
	if err != nil && !errors.Is(err, pg.ErrKeyClaimed) {
		s.writeError(buf, r, err)
	}
	done = true
	return buf.answer(), by, err
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
// replayed, rather than a transient state that a retry may change, or a
// request refused as it was written (400 invalid_request, 422
// validation_failed: it did nothing, and the client fixes it and sends it
// again under the same key; only the request that ran is kept to its key).
func finalStatus(status int) bool {
	return status < 500 && status != http.StatusTooManyRequests && status != 499 &&
		status != http.StatusBadRequest && status != http.StatusUnprocessableEntity
}

// answerFromEffect makes the answer of a key whose request committed its
// effect but whose answer was lost: for a hold, 201 with the booking as it
// is now. A key whose effect names nothing it can answer from stays 409
// idempotency_key_in_use: running it again could make the effect twice.
func (s *Server) answerFromEffect(q idempotency.Request, c auth.Caller) idempotency.FromEffect {
	return func(ctx context.Context, effect string) (*idempotency.Answer, error) {
		id, ok := booking.EffectBooking(effect)
		if !ok || q.Method != http.MethodPost || q.Path != "/bookings" {
			return nil, idempotency.KeyInUse()
		}
		b, err := booking.Get(ctx, s.Pool, c, id, s.Clock.Now())
		if err != nil {
			return nil, fmt.Errorf("answer idempotency key from booking %d: %w", id, err)
		}
		buf := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
		buf.header.Set("Location", fmt.Sprintf("/bookings/%d", b.ID))
		writeJSON(buf, http.StatusCreated, b.View())
		a := buf.answer()
		return &a, nil
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

func (b *bufferedResponse) answer() idempotency.Answer {
	a := idempotency.Answer{Status: b.status, Headers: map[string]string{}, Body: b.body.Bytes()}
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

func writeAnswer(w http.ResponseWriter, a *idempotency.Answer, replayed bool) {
	for k, v := range a.Headers {
		w.Header().Set(k, v)
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
}
