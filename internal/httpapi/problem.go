package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/guard"
	"berth.dev/berth/internal/pg"
)

// statusOf is the one table from error codes to HTTP statuses.
var statusOf = map[fault.Code]int{
	fault.InvalidRequest:       http.StatusBadRequest,
	fault.BodyTooLarge:         http.StatusRequestEntityTooLarge,
	fault.ValidationFailed:     http.StatusUnprocessableEntity,
	fault.Unauthenticated:      http.StatusUnauthorized,
	fault.Forbidden:            http.StatusForbidden,
	fault.NotFound:             http.StatusNotFound,
	fault.SeatUnavailable:      http.StatusConflict,
	fault.SoldOut:              http.StatusConflict,
	fault.CarUnavailable:       http.StatusConflict,
	fault.InvalidState:         http.StatusConflict,
	fault.HoldExpired:          http.StatusConflict,
	fault.IdempotencyKeyInUse:  http.StatusConflict,
	fault.IdempotencyKeyReused: http.StatusUnprocessableEntity,
	fault.RateLimited:          http.StatusTooManyRequests,
	fault.WaitingRoom:          http.StatusTooManyRequests,
	fault.Overloaded:           http.StatusServiceUnavailable,
	codeMethodNotAllowed:       http.StatusMethodNotAllowed,
}

// codeMethodNotAllowed answers a known path with a method it does not serve.
const codeMethodNotAllowed fault.Code = "method_not_allowed"

const problemBase = "https://berth.dev/problems/"

// Problem is an RFC 9457 problem document.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	Field  string `json:"field,omitempty"`
}

// writeError answers err as a problem document. Errors without a code are
// internal: logged with their cause, shown to the user as "internal error".
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	err = guard.AsOverload(r.Context(), err)
	var fe *fault.Error
	if !errors.As(err, &fe) {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			// The client went away; nobody reads the answer.
			s.log.Debug("request cancelled", "method", r.Method, "path", r.URL.Path)
			w.WriteHeader(499)
			return
		}
		s.log.Error("internal error", "method", r.Method, "path", r.URL.Path, "request_id", w.Header().Get("X-Request-Id"), "err", err)
		writeProblem(w, http.StatusInternalServerError, internalProblem, nil)
		return
	}
	if fe.Code == fault.Overloaded && pg.Refused(fe.Err) {
		// Not load that shedding answers: the database is away or full.
		s.warnLimited(w, r, "database refused a connection", "err", fe.Err)
	}
	status, ok := statusOf[fe.Code]
	if !ok {
		s.log.Error("error code without a status", "code", fe.Code, "err", err)
		status = http.StatusInternalServerError
	}
	if fe.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((fe.RetryAfter+999_999_999)/1_000_000_000)))
	}
	// /readyz says why itself, when its state changes (noteReadiness):
	// probes come every few seconds.
	if status >= 500 && r.Pattern != "GET /readyz" {
		s.warnLimited(w, r, "request refused", "code", fe.Code, "err", err)
	}
	writeProblem(w, status, Problem{
		Type: problemBase + string(fe.Code), Title: http.StatusText(status), Status: status,
		Detail: fe.Detail, Code: string(fe.Code), Field: fe.Field,
	}, fe.Extra)
}

// warnLimited logs a refusal at most once a second for each message and
// route, with how many like it were left out since the last line
// (lineLimit): an overload refuses thousands a second.
func (s *Server) warnLimited(w http.ResponseWriter, r *http.Request, msg string, args ...any) {
	ok, left := s.refusals.allow(lineKey{msg, r.Pattern}, s.Clock.Now())
	if !ok {
		return
	}
	args = append([]any{"method", r.Method, "path", r.URL.Path, "request_id", w.Header().Get("X-Request-Id")}, args...)
	if left > 0 {
		args = append(args, "left_out", left)
	}
	s.log.Warn(msg, args...)
}

// writeProblem answers p, with the members of extra beside its own (the
// waiting room's position, say). Most problems have none, and are encoded
// from the struct: encoding a map sorts its keys and reflects on each
// value, which was a tenth of the handler's CPU for a refused hold.
func writeProblem(w http.ResponseWriter, status int, p Problem, extra map[string]any) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if len(extra) == 0 {
		_ = json.NewEncoder(w).Encode(p)
		return
	}
	doc := map[string]any{"type": p.Type, "title": p.Title, "status": p.Status, "detail": p.Detail, "code": p.Code}
	if p.Field != "" {
		doc["field"] = p.Field
	}
	for k, v := range extra {
		doc[k] = v
	}
	_ = json.NewEncoder(w).Encode(doc)
}

// internalProblem is the answer to any error berth did not expect: its
// cause is logged, never shown.
var internalProblem = Problem{
	Type: problemBase + "internal", Title: "Internal Server Error", Status: 500,
	Detail: "internal error", Code: "internal",
}

// writeJSON answers status with v as JSON. v is encoded before the status
// is sent: a value that cannot be written (a time past year 9999) must
// not become a 2xx with an empty body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		slog.Error("encode response", "err", err)
		writeProblem(w, http.StatusInternalServerError, internalProblem, nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
