package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"berth.dev/berth/internal/fault"
)

// maxBody is the largest request body berth reads.
const maxBody = 64 << 10

// decode reads r's JSON body into dst strictly: one JSON value, no unknown
// fields, at most maxBody bytes. Malformed input is fault.InvalidRequest.
// The Content-Type is not checked: the body must parse as JSON either way.
func decode(w http.ResponseWriter, r *http.Request, dst any) error {
	body := http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return decodeError(err)
		}
		return fault.New(fault.InvalidRequest, "the body must hold one JSON value")
	}
	return nil
}

func decodeError(err error) error {
	var (
		syntax  *json.SyntaxError
		typ     *json.UnmarshalTypeError
		tooBig  *http.MaxBytesError
		invalid = fault.InvalidRequest
	)
	switch {
	case errors.As(err, &tooBig):
		return &fault.Error{Code: fault.BodyTooLarge, Detail: fmt.Sprintf("the body is larger than %d bytes", maxBody)}
	case errors.As(err, &syntax):
		return fault.New(invalid, "malformed JSON at byte %d", syntax.Offset)
	case errors.As(err, &typ):
		return &fault.Error{Code: invalid, Field: typ.Field, Detail: fmt.Sprintf("%s: must be %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)}
	case errors.Is(err, io.EOF):
		return fault.New(invalid, "the body is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fault.New(invalid, "malformed JSON: the body ends early")
	}
	// encoding/json reports unknown fields only as text.
	return fault.New(invalid, "%s", err.Error())
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64", "int32":
		return "an integer"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return goKind
}

// parseTime reads an RFC 3339 timestamp with an offset; field names the
// input in the error.
func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, fault.Invalid(field, "is required")
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fault.Invalid(field, "%q is not an RFC 3339 timestamp with an offset, like 2026-01-25T08:00:00+07:00", s)
	}
	return t, nil
}

// pathID reads the path's {id} as a positive id of a thing: anything else
// is an unknown id (404).
func pathID(r *http.Request, thing string) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fault.New(fault.NotFound, "no %s %q", thing, r.PathValue("id"))
	}
	return id, nil
}
