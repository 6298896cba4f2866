package httpapi_test

import (
	"encoding/json"
	"fmt"
	"math"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paytest"
)

// Real answers of the running server, for every kind of thing it returns,
// are held to the document: the status is documented for the operation,
// with the answer's content type, and the body has every required field and
// no field the schema does not name, each of the documented type. A field
// added to an answer (booking.View, a car, a fare) without documenting it
// fails here.
func TestOpenAPIDescribesRealAnswers(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	_, doc := fetchOpenAPI(t, s)
	admin, host, customer := s.Token("admin", 1), s.Token("host", 50), s.Token("customer", 7)
	check := func(method, path string, r *apptest.Response) *apptest.Response {
		t.Helper()
		for _, p := range conform(doc.raw, method, path, r) {
			t.Errorf("%s %s → %d %s: %s", method, path, r.Status, r.Body, p)
		}
		return r
	}
	do := func(path string, req apptest.Request) *apptest.Response {
		t.Helper()
		return check(req.Method, path, s.Do(req))
	}
	// Raw requests and bodies throughout: what this test holds to the
	// document is the wire itself, right and wrong requests alike. id
	// reads the id an answer names in field ("id" or "bookingId").
	id := func(r *apptest.Response, field string) int64 {
		t.Helper()
		var ids struct {
			ID        int64 `json:"id"`
			BookingID int64 `json:"bookingId"`
		}
		r.JSON(t, &ids)
		v := ids.ID
		if field == "bookingId" {
			v = ids.BookingID
		}
		if v == 0 {
			t.Fatalf("no %s in %s", field, r.Body)
		}
		return v
	}

	do("/healthz", apptest.Request{Method: "GET", Path: "/healthz"})
	do("/readyz", apptest.Request{Method: "GET", Path: "/readyz"})

	dep := apptest.Epoch.Add(72 * time.Hour)
	created := do("/admin/flights", apptest.Request{Method: "POST", Path: "/admin/flights", Token: admin, Body: map[string]any{
		"code": "VN901", "from": "SGN", "to": "HAN",
		"departureAt": dep.Format(time.RFC3339), "arrivalAt": dep.Add(2 * time.Hour).Format(time.RFC3339),
		"fares": []map[string]any{{"fareClass": "ECONOMY", "price": 1500000, "currency": "VND", "capacity": 6,
			"overbookLimit": 1, "seats": apptest.Seats(1, 1, "ABCDEF"), "refundable": 50, "refundCutoff": "48h", "buckets": 2}},
	}})
	if created.Status != http.StatusCreated {
		t.Fatalf("create flight: %d %s", created.Status, created.Body)
	}
	flight := id(created, "id")
	do("/admin/flights", apptest.Request{Method: "POST", Path: "/admin/flights", Token: admin, Body: `{"code": 1}`})
	do("/admin/flights", apptest.Request{Method: "POST", Path: "/admin/flights", Token: customer, Body: map[string]any{}})
	do("/admin/flights", apptest.Request{Method: "POST", Path: "/admin/flights", Body: map[string]any{}})
	do("/flights", apptest.Request{Method: "GET", Path: "/flights?from=sgn&to=HAN&date=" + dep.Format(time.DateOnly)})
	do("/flights", apptest.Request{Method: "GET", Path: "/flights?from=SGN&to=HAN&date=tomorrow"})
	do("/flights/{id}", apptest.Request{Method: "GET", Path: fmt.Sprintf("/flights/%d", flight)})
	do("/flights/{id}", apptest.Request{Method: "GET", Path: "/flights/999999"})
	do("/flights/{id}/seats", apptest.Request{Method: "GET", Path: fmt.Sprintf("/flights/%d/seats", flight)})
	farePath := fmt.Sprintf("/admin/flights/%d/fares/ECONOMY", flight)
	do("/admin/flights/{id}/fares/{fareClass}", apptest.Request{Method: "PATCH", Path: farePath, Token: admin, Body: map[string]any{"overbookLimit": 2}})
	do("/admin/flights/{id}/fares/{fareClass}", apptest.Request{Method: "PATCH", Path: farePath, Token: admin, Body: map[string]any{"buckets": 1}})

	seatHold := do("/bookings", apptest.Request{Method: "POST", Path: "/bookings", Token: customer,
		Body: map[string]any{"flightId": flight, "fareClass": "ECONOMY", "seats": []string{"1A", "1B"}}})
	if seatHold.Status != http.StatusCreated {
		t.Fatalf("hold seats: %d %s", seatHold.Status, seatHold.Body)
	}
	booking := id(seatHold, "bookingId")
	do("/bookings", apptest.Request{Method: "POST", Path: "/bookings", Token: s.Token("customer", 8),
		Body: map[string]any{"flightId": flight, "fareClass": "ECONOMY", "seats": []string{"1A"}}})
	quantity := do("/bookings", apptest.Request{Method: "POST", Path: "/bookings", Token: customer, Header: map[string]string{"Idempotency-Key": "q-1"},
		Body: map[string]any{"flightId": flight, "fareClass": "ECONOMY", "quantity": 2}})
	replayed := do("/bookings", apptest.Request{Method: "POST", Path: "/bookings", Token: customer, Header: map[string]string{"Idempotency-Key": "q-1"},
		Body: map[string]any{"flightId": flight, "fareClass": "ECONOMY", "quantity": 2}})
	if replayed.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("repeat under an Idempotency-Key: no Idempotent-Replayed: true")
	}
	do("/bookings", apptest.Request{Method: "POST", Path: "/bookings", Token: customer,
		Body: map[string]any{"flightId": flight, "fareClass": "ECONOMY", "quantity": 9}})
	do("/bookings", apptest.Request{Method: "POST", Path: "/bookings", Token: customer,
		Body: map[string]any{"flightId": flight, "fareClass": "FIRST", "quantity": 1}})
	pay := fmt.Sprintf("/bookings/%d/payments", booking)
	do("/bookings/{id}/payments", apptest.Request{Method: "POST", Path: pay, Token: customer, Header: map[string]string{"Idempotency-Key": "pay-1"}})
	do("/bookings/{id}/payments", apptest.Request{Method: "POST", Path: pay, Token: customer})
	do("/bookings/{id}", apptest.Request{Method: "GET", Path: fmt.Sprintf("/bookings/%d", booking), Token: customer})
	do("/bookings/{id}", apptest.Request{Method: "GET", Path: fmt.Sprintf("/bookings/%d", booking), Token: s.Token("customer", 8)})
	do("/bookings", apptest.Request{Method: "GET", Path: "/bookings?limit=5", Token: customer})
	do("/bookings", apptest.Request{Method: "GET", Path: "/bookings?limit=500", Token: customer})
	do("/bookings/{id}/cancel", apptest.Request{Method: "POST", Path: fmt.Sprintf("/bookings/%d/cancel", booking), Token: customer})
	do("/bookings/{id}", apptest.Request{Method: "DELETE", Path: fmt.Sprintf("/bookings/%d", booking), Token: customer})

	// Paid, then cancelled by its customer: a refund by the fare's rule.
	paid := paytest.Charge(t, s.App.Pool, id(quantity, "bookingId"))
	check("POST", "/payments/webhook", paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, paid))
	check("POST", "/payments/webhook", paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, paid))
	refunded := do("/bookings/{id}", apptest.Request{Method: "DELETE", Path: fmt.Sprintf("/bookings/%d", id(quantity, "bookingId")), Token: customer})
	var rv struct {
		RefundStatus string `json:"refundStatus"`
		RefundAmount int64  `json:"refundAmount"`
	}
	refunded.JSON(t, &rv)
	if rv.RefundStatus != "REQUESTED" || rv.RefundAmount != 1500000 {
		t.Errorf("cancelled after paying: %s, want refundStatus REQUESTED and half the amount back", refunded.Body)
	}
	do("/payments/webhook", apptest.Request{Method: "POST", Path: "/payments/webhook", Body: map[string]any{"type": "charge.succeeded"}})

	car := do("/host/cars", apptest.Request{Method: "POST", Path: "/host/cars", Token: host, Body: map[string]any{
		"plate": "30A-123.45", "model": "VinFast VF8", "city": "HN", "dailyPrice": 1200000, "deposit": 500000,
		"currency": "VND", "turnaround": "2h"}})
	if car.Status != http.StatusCreated {
		t.Fatalf("create car: %d %s", car.Status, car.Body)
	}
	carID := id(car, "id")
	do("/host/cars", apptest.Request{Method: "POST", Path: "/host/cars", Token: customer, Body: map[string]any{}})
	from, to := apptest.Epoch.Add(96*time.Hour).In(time.FixedZone("", 7*3600)), apptest.Epoch.Add(120*time.Hour).In(time.FixedZone("", 7*3600))
	period := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}}.Encode()
	do("/cars", apptest.Request{Method: "GET", Path: "/cars?city=hn&limit=1&" + period})
	do("/cars", apptest.Request{Method: "GET", Path: "/cars?city=HN&from=2026-12-05T10:00:00&to=2026-12-06T10:00:00Z"})
	do("/cars/{id}", apptest.Request{Method: "GET", Path: fmt.Sprintf("/cars/%d", carID)})
	carHold := do("/bookings", apptest.Request{Method: "POST", Path: "/bookings", Token: customer, Header: map[string]string{"Idempotency-Key": "car-1"},
		Body: map[string]any{"carId": carID, "from": from.Format(time.RFC3339), "to": to.Format(time.RFC3339)}})
	if carHold.Status != http.StatusCreated {
		t.Fatalf("hold car: %d %s", carHold.Status, carHold.Body)
	}
	do("/bookings", apptest.Request{Method: "POST", Path: "/bookings", Token: s.Token("customer", 9), Header: map[string]string{"Idempotency-Key": "car-2"},
		Body: map[string]any{"carId": carID, "from": from.Format(time.RFC3339), "to": to.Format(time.RFC3339)}})
	do("/bookings", apptest.Request{Method: "POST", Path: "/bookings", Token: customer,
		Body: map[string]any{"carId": carID, "from": from.Format(time.RFC3339), "to": to.Format(time.RFC3339)}})
	do("/cars/{id}/calendar", apptest.Request{Method: "GET", Path: fmt.Sprintf("/cars/%d/calendar?%s", carID, period)})
	carBooking := id(carHold, "bookingId")
	pickup, ret := fmt.Sprintf("/bookings/%d/pickup", carBooking), fmt.Sprintf("/bookings/%d/return", carBooking)
	do("/bookings/{id}/pickup", apptest.Request{Method: "POST", Path: pickup, Token: host}) // not paid yet: 409
	check("POST", "/payments/webhook", paytest.Send(t, s.URL, s.Clock.Now(), payment.ChargeSucceeded, paytest.Charge(t, s.App.Pool, carBooking)))
	do("/bookings/{id}/pickup", apptest.Request{Method: "POST", Path: pickup, Token: customer})
	// The hand-over happens at pickup time (BERTH_PICKUP_EARLY before it
	// at the earliest); then back to now for the rest.
	now := s.Clock.Now()
	s.Clock.Set(from)
	hostThen := s.Token("host", 50)
	do("/bookings/{id}/pickup", apptest.Request{Method: "POST", Path: pickup, Token: hostThen})
	do("/bookings/{id}/return", apptest.Request{Method: "POST", Path: ret, Token: s.Token("host", 51)})
	if r := do("/bookings/{id}/return", apptest.Request{Method: "POST", Path: ret, Token: hostThen}); r.Map(t)["status"] != "COMPLETED" {
		t.Errorf("return: %d %s, want COMPLETED", r.Status, r.Body)
	}
	s.Clock.Set(now)
	do("/bookings/{id}", apptest.Request{Method: "GET", Path: fmt.Sprintf("/bookings/%d", carBooking), Token: host})

	roomPath := fmt.Sprintf("/admin/flights/%d", flight)
	do("/admin/flights/{id}", apptest.Request{Method: "PATCH", Path: roomPath, Token: admin,
		Body: map[string]any{"waitingRoom": map[string]any{"enabled": true, "admitPerSecond": 1}}})
	do("/admin/flights/{id}", apptest.Request{Method: "PATCH", Path: roomPath, Token: admin, Body: map[string]any{"waitingRoom": map[string]any{}}})
	queued := do("/bookings", apptest.Request{Method: "POST", Path: "/bookings", Token: s.Token("customer", 10),
		Body: map[string]any{"flightId": flight, "fareClass": "ECONOMY", "seats": []string{"1C"}}})
	ticket, _ := queued.Map(t)["ticket"].(string)
	if queued.Status != http.StatusTooManyRequests || ticket == "" {
		t.Fatalf("hold with the waiting room on: %d %s, want 429 with a ticket", queued.Status, queued.Body)
	}
	do("/waiting-room/{ticket}", apptest.Request{Method: "GET", Path: "/waiting-room/" + url.PathEscape(ticket), Token: s.Token("customer", 10)})
	do("/waiting-room/{ticket}", apptest.Request{Method: "GET", Path: "/waiting-room/forged", Token: customer})
}

// conform lists how answer r of operation method path departs from the
// document.
func conform(root map[string]any, method, path string, r *apptest.Response) []string {
	op, err := resolve(root, "#/paths/"+escapePointer(path)+"/"+strings.ToLower(method))
	if err != nil {
		return []string{"operation not documented: " + err.Error()}
	}
	responses, _ := op.(map[string]any)["responses"].(map[string]any)
	status := strconv.Itoa(r.Status)
	resp, ok := responses[status]
	if !ok {
		resp, ok = responses[status[:1]+"XX"]
	}
	if !ok {
		return []string{"status not documented"}
	}
	resp = deref(root, resp)
	content, _ := resp.(map[string]any)["content"].(map[string]any)
	if len(content) == 0 && len(r.Body) == 0 {
		return nil
	}
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return []string{"no content type"}
	}
	media, ok := content[ct].(map[string]any)
	if !ok {
		return []string{"content type " + ct + " not documented"}
	}
	if ct != "application/json" && !strings.HasSuffix(ct, "+json") {
		return nil // YAML, HTML, Prometheus text: the type is what is documented
	}
	var body any
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return []string{"body is not JSON"}
	}
	return matches(root, media["schema"], body, "body")
}

// escapePointer escapes a path for a JSON pointer (RFC 6901).
var escapePointer = strings.NewReplacer("~", "~0", "/", "~1").Replace

// deref follows $ref until it reaches a schema or object that is not one.
func deref(root map[string]any, v any) any {
	for range 10 {
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return v
		}
		if v, ok = must(resolve(root, ref)); !ok {
			return nil
		}
	}
	return v
}

func must(v any, err error) (any, bool) { return v, err == nil }

// objectShape is an object schema with its allOf branches merged: the
// properties (a later branch's overriding an earlier one's, so the most
// specific schema of a field wins), the required fields, and what may
// appear besides them.
type objectShape struct {
	props      map[string]any
	required   []string
	additional any
}

func shapeOf(root map[string]any, schema any, into *objectShape) {
	m, _ := deref(root, schema).(map[string]any)
	for _, sub := range asList(m["allOf"]) {
		shapeOf(root, sub, into)
	}
	props, _ := m["properties"].(map[string]any)
	for k, v := range props {
		into.props[k] = v
	}
	for _, r := range asList(m["required"]) {
		into.required = append(into.required, fmt.Sprint(r))
	}
	if a, ok := m["additionalProperties"]; ok {
		into.additional = a
	}
}

func asList(v any) []any { l, _ := v.([]any); return l }

// matches lists how value v departs from schema, strictly: an object field
// the schema does not name is a departure unless additionalProperties
// allows it.
func matches(root map[string]any, schema, v any, where string) []string {
	m, ok := deref(root, schema).(map[string]any)
	if !ok {
		return []string{where + ": schema does not resolve"}
	}
	if branches := asList(m["oneOf"]); len(branches) > 0 {
		var all []string
		for _, b := range branches {
			p := matches(root, b, v, where)
			if len(p) == 0 {
				return nil
			}
			all = append(all, p...)
		}
		return append([]string{where + ": matches no oneOf branch"}, all...)
	}
	var problems []string
	if c, ok := m["const"]; ok && fmt.Sprint(c) != fmt.Sprint(v) {
		problems = append(problems, fmt.Sprintf("%s: %v, want %v", where, v, c))
	}
	if e := asList(m["enum"]); len(e) > 0 && !slices.ContainsFunc(e, func(x any) bool { return fmt.Sprint(x) == fmt.Sprint(v) }) {
		problems = append(problems, fmt.Sprintf("%s: %v is not one of %v", where, v, e))
	}
	typ, _ := m["type"].(string)
	if typ == "" && len(asList(m["allOf"])) > 0 {
		typ = "object"
		if _, isObj := v.(map[string]any); !isObj {
			// allOf of a scalar (a Currency with its own description)
			for _, b := range asList(m["allOf"]) {
				problems = append(problems, matches(root, b, v, where)...)
			}
			return problems
		}
	}
	switch typ {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return append(problems, fmt.Sprintf("%s: %T, want an object", where, v))
		}
		shape := objectShape{props: map[string]any{}}
		shapeOf(root, m, &shape)
		for _, r := range shape.required {
			if _, ok := obj[r]; !ok {
				problems = append(problems, fmt.Sprintf("%s: required %s missing", where, r))
			}
		}
		for k, fv := range obj {
			ps, ok := shape.props[k]
			switch {
			case ok:
				problems = append(problems, matches(root, ps, fv, where+"."+k)...)
			case shape.additional == nil || shape.additional == false:
				problems = append(problems, fmt.Sprintf("%s: field %s not documented", where, k))
			case shape.additional != true:
				problems = append(problems, matches(root, shape.additional, fv, where+"."+k)...)
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return append(problems, fmt.Sprintf("%s: %T, want an array", where, v))
		}
		for i, x := range arr {
			problems = append(problems, matches(root, m["items"], x, fmt.Sprintf("%s[%d]", where, i))...)
		}
	case "integer":
		if f, ok := v.(float64); !ok || f != math.Trunc(f) {
			problems = append(problems, fmt.Sprintf("%s: %v, want an integer", where, v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			problems = append(problems, fmt.Sprintf("%s: %v, want a boolean", where, v))
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return append(problems, fmt.Sprintf("%s: %v, want a string", where, v))
		}
		if m["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %q is not RFC 3339", where, str))
			}
		}
	}
	return problems
}
