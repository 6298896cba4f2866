package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"berth.dev/berth/internal/fault"
)

// maxBody is the largest request body berth reads.
const maxBody = 64 << 10

// decode reads r's JSON body into dst strictly: valid UTF-8, one JSON
// value, no unknown fields, no key twice in an object and every key
// exactly as documented (encoding/json alone would match "FlightId" to
// flightId and let the last of two keys win), at most maxBody bytes.
// Malformed input is fault.InvalidRequest. The Content-Type is not
// checked: the body must parse as JSON either way.
func decode(w http.ResponseWriter, r *http.Request, dst any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return decodeError(err)
	}
	return decodeJSON(body, dst)
}

// decodeJSON is decode on a body already read.
func decodeJSON(body []byte, dst any) error {
	if !utf8.Valid(body) {
		return fault.New(fault.InvalidRequest, "the body must be UTF-8")
	}
	if err := checkKeys(json.NewDecoder(bytes.NewReader(body)), reflect.TypeOf(dst)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
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

// checkKeys walks one JSON value from dec beside the Go type t it will be
// decoded into, and refuses an object with a key twice, or with a key
// that matches a struct field only when case is ignored. Syntax errors
// are left to the decoder, which reports them with their offset.
func checkKeys(dec *json.Decoder, t reflect.Type) error {
	tok, err := dec.Token()
	if err == nil {
		err = checkValue(dec, tok, t, 0)
	}
	var fe *fault.Error
	if !errors.As(err, &fe) {
		err = nil // a syntax error: the decoder reports it, with its offset
	}
	return err
}

// maxDepth bounds the nesting checkKeys follows (the decoder's own limit
// is far higher; berth's bodies are two or three levels deep).
const maxDepth = 64

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

func checkValue(dec *json.Decoder, tok json.Token, t reflect.Type, depth int) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshaler)) {
		t = nil // decoded by itself, or into anything: keys are only checked for duplicates
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth > maxDepth {
		return fault.New(fault.InvalidRequest, "the body is nested more than %d levels deep", maxDepth)
	}
	switch d {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			if err := checkValue(dec, tok, elem, depth+1); err != nil {
				return err
			}
		}
	case '{':
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := tok.(string)
			if seen[key] {
				return &fault.Error{Code: fault.InvalidRequest, Field: key, Detail: fmt.Sprintf("%s: the key appears twice", key)}
			}
			seen[key] = true
			var vt reflect.Type
			switch {
			case fields != nil:
				var known bool
				if vt, known = fields[key]; !known {
					for name := range fields {
						if strings.EqualFold(name, key) {
							return &fault.Error{Code: fault.InvalidRequest, Field: key,
								Detail: fmt.Sprintf("%s: unknown field (keys are case-sensitive: %s)", key, name)}
						}
					}
				}
			case t != nil && t.Kind() == reflect.Map:
				vt = t.Elem()
			}
			if tok, err = dec.Token(); err != nil {
				return err
			}
			if err := checkValue(dec, tok, vt, depth+1); err != nil {
				return err
			}
		}
	}
	_, _ = dec.Token() // the closing delimiter
	return nil
}

// jsonFields maps the JSON names of struct t's fields (embedded structs'
// included) to their types, as encoding/json names them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = ft
	}
	return out
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
