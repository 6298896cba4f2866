package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
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
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	return decodeJSON(body, dst)
}

// readBody reads r's body, at most maxBody bytes (413 body_too_large
// beyond): the bytes checkInput read ahead, without a copy, when it did.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if ahead, ok := r.Body.(*readAhead); ok {
		return ahead.data, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return nil, decodeError(err)
	}
	return body, nil
}

// readAhead is a request body checkInput has read whole: readBody gives
// its bytes to whatever asks (the handler, the Idempotency-Key's request
// hash), as often as asked, and it still reads as a body.
type readAhead struct {
	*bytes.Reader
	data []byte
}

func (readAhead) Close() error { return nil }

// checkInput refuses, before a route's handler, what the handler would
// otherwise ignore without a word: a query string that does not parse (a
// bad percent escape, a semicolon), whose parameters url.Values would
// drop, so that ?limit=%zz is not served as if there were no limit; and,
// on a bodiless route (one that acts on its path alone), a body, malformed
// or with fields the client believes count. Nothing, blanks, {} and null
// are no body. Every route's body is read here, whole (at most maxBody),
// before the request takes a place in its lane: a client trickling a body
// a byte a second holds a connection, never one of the lane's few places.
// What was read stays with the request for what reads it after (readBody).
func checkInput(w http.ResponseWriter, r *http.Request, bodiless bool) error {
	if r.URL.RawQuery != "" {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			return fault.New(fault.InvalidRequest, "the query string does not parse: %v", err)
		}
		// Every parameter takes one value: a second one would be silently
		// dropped by one reader and taken by another (a proxy, a cache).
		for k, v := range q {
			if len(v) > 1 {
				return fault.New(fault.InvalidRequest, "the query parameter %s is given %d times: give it once", k, len(v))
			}
		}
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	r.Body = &readAhead{Reader: bytes.NewReader(body), data: body}
	if !bodiless || len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return decodeJSON(body, &struct{}{})
}

// decodeJSON is decode on a body already read.
func decodeJSON(body []byte, dst any) error {
	if !utf8.Valid(body) {
		return fault.New(fault.InvalidRequest, "the body must be UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		return fault.New(fault.InvalidRequest, "the body must hold one JSON value")
	}
	return checkKeys(body, reflect.TypeOf(dst))
}

// checkKeys walks body, one valid JSON value that encoding/json decoded
// into the Go type t, beside t, and refuses an object with a key twice, or
// with a key that matches a struct field only when case is ignored (which
// encoding/json accepts).
//
// It reads the bytes itself rather than through json.Decoder.Token, which
// allocates for every token: this check runs for every hold, accepted or
// refused, and the token walk was most of its decoding's cost.
func checkKeys(body []byte, t reflect.Type) error {
	w := keyWalk{b: body}
	return w.value(t, 0)
}

// maxDepth bounds the nesting checkKeys follows (the decoder's own limit
// is far higher; berth's bodies are two or three levels deep).
const maxDepth = 64

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// keyWalk reads a valid JSON document from b, at i.
type keyWalk struct {
	b []byte
	i int
}

// value checks the value at w.i, to be decoded into t (nil: anything),
// and moves past it.
func (w *keyWalk) value(t reflect.Type, depth int) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshaler)) {
		t = nil // decoded by itself, or into anything: keys are only checked for duplicates
	}
	w.space()
	switch w.b[w.i] {
	case '[':
		if depth > maxDepth {
			return tooDeep()
		}
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		return w.each(']', func() error { return w.value(elem, depth+1) })
	case '{':
		if depth > maxDepth {
			return tooDeep()
		}
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		seen := map[string]bool{}
		return w.each('}', func() error {
			key := w.key()
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
			w.space()
			w.i++ // the colon
			return w.value(vt, depth+1)
		})
	case '"':
		w.str()
	default: // a number, true, false or null
		for w.i < len(w.b) && strings.IndexByte(",]} \t\n\r", w.b[w.i]) < 0 {
			w.i++
		}
	}
	return nil
}

// each calls item for each element of the array or object at w.i, whose
// closing delimiter is end, and moves past it.
func (w *keyWalk) each(end byte, item func() error) error {
	w.i++ // the opening delimiter
	w.space()
	if w.b[w.i] == end {
		w.i++
		return nil
	}
	for {
		if err := item(); err != nil {
			return err
		}
		w.space()
		c := w.b[w.i]
		w.i++ // a comma, or end
		if c == end {
			return nil
		}
	}
}

// key reads the object key at w.i (after any space), as encoding/json
// reads it.
func (w *keyWalk) key() string {
	w.space()
	raw := w.str()
	if !bytes.ContainsRune(raw, '\\') {
		return string(raw[1 : len(raw)-1])
	}
	var key string
	_ = json.Unmarshal(raw, &key) // valid JSON: a string
	return key
}

// str moves past the string at w.i and returns it, quotes included.
func (w *keyWalk) str() []byte {
	from := w.i
	for w.i++; w.b[w.i] != '"'; w.i++ {
		if w.b[w.i] == '\\' {
			w.i++ // the escaped character
		}
	}
	w.i++
	return w.b[from:w.i]
}

func (w *keyWalk) space() {
	for w.i < len(w.b) && strings.IndexByte(" \t\n\r", w.b[w.i]) >= 0 {
		w.i++
	}
}

func tooDeep() error {
	return fault.New(fault.InvalidRequest, "the body is nested more than %d levels deep", maxDepth)
}

// fieldsByType keeps jsonFields' answers: berth decodes a few request
// types, each of them on every request.
var fieldsByType sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields maps the JSON names of struct t's fields (embedded structs'
// included) to their types, as encoding/json names them. The map is
// shared: it must not be changed.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldsByType.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	f := readFields(t)
	fieldsByType.Store(t, f)
	return f
}

// readFields is jsonFields without the cache.
func readFields(t reflect.Type) map[string]reflect.Type {
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
	case errors.As(err, &syntax) && strings.Contains(syntax.Error(), "exceeded max depth"):
		return tooDeep() // valid JSON, nested beyond what encoding/json follows
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
	// RFC 3339 lets the "T" and the "Z" be written in lower case, which
	// Go's layout does not; and it has no decimal comma, which Go reads.
	given := s
	if len(s) > 10 && s[10] == 't' {
		s = s[:10] + "T" + s[11:]
	}
	if strings.HasSuffix(s, "z") {
		s = s[:len(s)-1] + "Z"
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || strings.Contains(s, ",") {
		return time.Time{}, fault.Invalid(field, "%q is not an RFC 3339 timestamp with an offset, like 2026-01-25T08:00:00+07:00", given)
	}
	return t, nil
}

// pathID reads the path's {id} as a positive id of a thing: anything else
// is an unknown id (404).
func pathID(r *http.Request, thing string) (int64, error) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	// Only the canonical form names a resource: /bookings/042 and
	// /bookings/+42 are not /bookings/42.
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != raw {
		return 0, fault.New(fault.NotFound, "no %s %q", thing, r.PathValue("id"))
	}
	return id, nil
}
