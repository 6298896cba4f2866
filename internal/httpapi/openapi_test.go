package httpapi_test

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/httpapi"
)

// openAPIMethods are the operation keys of an OpenAPI path item.
var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// apiDoc is the part of the OpenAPI document the tests hold to the server.
type apiDoc struct {
	OpenAPI string                          `yaml:"openapi"`
	Paths   map[string]map[string]yaml.Node `yaml:"paths"`
	// Security is the default of operations that do not set their own.
	Security []map[string][]string `yaml:"security"`
	raw      map[string]any
}

// apiOperation is what the tests read of one operation.
type apiOperation struct {
	// Security is nil when the operation inherits the document's; an
	// empty list means no authentication.
	Security *[]map[string][]string `yaml:"security"`
	Roles    []string               `yaml:"x-roles"`
	// Parameters are the operation's parameters, as written: a $ref or
	// the parameter itself.
	Parameters []map[string]any `yaml:"parameters"`
	// Responses are the operation's answers by status.
	Responses map[string]any `yaml:"responses"`
}

func fetchOpenAPI(t *testing.T, s *apptest.Server) (*apptest.Response, *apiDoc) {
	t.Helper()
	r := s.Do(apptest.Request{Method: http.MethodGet, Path: "/openapi.yaml"})
	if r.Status != http.StatusOK {
		t.Fatalf("GET /openapi.yaml: %d %s", r.Status, r.Body)
	}
	doc := &apiDoc{}
	if err := yaml.Unmarshal(r.Body, doc); err != nil {
		t.Fatalf("parse /openapi.yaml: %v", err)
	}
	if err := yaml.Unmarshal(r.Body, &doc.raw); err != nil {
		t.Fatalf("parse /openapi.yaml: %v", err)
	}
	return r, doc
}

// GET /openapi.yaml is public, YAML, cacheable and revalidated by ETag; the
// document is OpenAPI 3.1 and describes exactly the routes the server
// registers, with the authentication each one really asks for.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	r, doc := fetchOpenAPI(t, s)

	if ct := r.Header.Get("Content-Type"); ct != "application/yaml" {
		t.Errorf("Content-Type %q, want application/yaml", ct)
	}
	if cc := r.Header.Get("Cache-Control"); !strings.Contains(cc, "public") || !strings.Contains(cc, "max-age=") {
		t.Errorf("Cache-Control %q, want public with a max-age", cc)
	}
	etag := r.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	again := s.Do(apptest.Request{Method: http.MethodGet, Path: "/openapi.yaml", Header: map[string]string{"If-None-Match": etag}})
	if again.Status != http.StatusNotModified || len(again.Body) != 0 {
		t.Errorf("If-None-Match %s: %d with %d bytes, want 304 and no body", etag, again.Status, len(again.Body))
	}
	metrics := s.Do(apptest.Request{Method: http.MethodGet, Path: "/metrics"})
	for _, a := range []struct {
		path string
		r    *apptest.Response
	}{{"/openapi.yaml", r}, {"/openapi.yaml", again}, {"/metrics", metrics}} {
		for _, p := range conform(doc.raw, http.MethodGet, a.path, a.r) {
			t.Errorf("GET %s → %d: %s", a.path, a.r.Status, p)
		}
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Errorf("openapi %q, want 3.1.x", doc.OpenAPI)
	}

	routes := s.App.API.Routes()
	for _, want := range []string{"GET /openapi.yaml", "GET /metrics", "POST /bookings", "GET /paysim/checkout/{txn}"} {
		if !slices.ContainsFunc(routes, func(r httpapi.Route) bool { return r.Pattern() == want }) {
			t.Errorf("Routes() lacks %s: %v", want, routes)
		}
	}
	for _, p := range compareRoutes(t, routes, doc) {
		t.Error(p)
	}
	for _, p := range checkDocument(doc) {
		t.Error(p)
	}
}

// The comparison catches a route added without documentation, a documented
// route that is gone, and a route whose access differs from its document:
// without this, TestOpenAPIDescribesEveryRoute could pass by comparing
// nothing.
func TestOpenAPIComparisonCatchesDrift(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	_, doc := fetchOpenAPI(t, s)
	routes := s.App.API.Routes()
	if p := compareRoutes(t, routes, doc); len(p) != 0 {
		t.Fatalf("the real routes already disagree: %v", p)
	}

	added := append(slices.Clone(routes), httpapi.Route{Method: "GET", Path: "/undocumented/{id}", Roles: []string{"admin"}})
	if p := compareRoutes(t, added, doc); !containsAll(p, "GET /undocumented/{id}") {
		t.Errorf("an undocumented route: %v, want it named", p)
	}

	i := slices.IndexFunc(routes, func(r httpapi.Route) bool { return r.Pattern() == "PATCH /admin/flights/{id}" })
	removed := slices.Delete(slices.Clone(routes), i, i+1)
	if p := compareRoutes(t, removed, doc); !containsAll(p, "patch /admin/flights/{id}") {
		t.Errorf("a documented route that is not served: %v, want it named", p)
	}

	public := slices.Clone(routes)
	j := slices.IndexFunc(public, func(r httpapi.Route) bool { return r.Pattern() == "POST /admin/flights" })
	public[j].Roles = nil
	if p := compareRoutes(t, public, doc); !containsAll(p, "POST /admin/flights") {
		t.Errorf("a route whose access differs: %v, want it named", p)
	}

	roles := slices.Clone(routes)
	k := slices.IndexFunc(roles, func(r httpapi.Route) bool { return r.Pattern() == "POST /host/cars" })
	roles[k].Roles = []string{"host"}
	if p := compareRoutes(t, roles, doc); !containsAll(p, "POST /host/cars") {
		t.Errorf("a route whose roles differ: %v, want it named", p)
	}

	for _, c := range []struct {
		pattern string
		idem    httpapi.Idempotency
	}{{"POST /bookings", httpapi.NoKey}, {"POST /bookings/{id}/payments", httpapi.KeyOptional}, {"POST /bookings/{id}/cancel", httpapi.KeyRequired}} {
		keys := slices.Clone(routes)
		i := slices.IndexFunc(keys, func(r httpapi.Route) bool { return r.Pattern() == c.pattern })
		keys[i].Idempotency = c.idem
		if p := compareRoutes(t, keys, doc); !containsAll(p, c.pattern+" takes Idempotency-Key") {
			t.Errorf("a route whose Idempotency-Key differs (%s): %v, want it named", c.pattern, p)
		}
	}
}

func containsAll(problems []string, s string) bool {
	return slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, s) })
}

// compareRoutes lists every disagreement between the server's routes and
// the document: a route without its path and method in the document, a
// documented path and method that no route serves, and authentication that
// differs (public routes must say security: [], the others must need a
// bearer token with exactly the route's roles in x-roles). A route that
// takes every method under a subtree (the /paysim/ mount) must have at least
// one documented path under it, and covers the documented paths under it.
func compareRoutes(t *testing.T, routes []httpapi.Route, doc *apiDoc) []string {
	t.Helper()
	var problems []string
	served := map[string]httpapi.Route{}
	var subtrees []string
	for _, r := range routes {
		if r.Method == "" {
			subtrees = append(subtrees, r.Path)
			documented := false
			for p := range doc.Paths {
				documented = documented || strings.HasPrefix(p, r.Path)
			}
			if !documented {
				problems = append(problems, fmt.Sprintf("route %s: no path under it in the document", r.Pattern()))
			}
			continue
		}
		served[strings.ToLower(r.Method)+" "+r.Path] = r
		item, ok := doc.Paths[r.Path]
		if !ok {
			problems = append(problems, fmt.Sprintf("route %s: path not in the document", r.Pattern()))
			continue
		}
		node, ok := item[strings.ToLower(r.Method)]
		if !ok {
			problems = append(problems, fmt.Sprintf("route %s: method not in the document", r.Pattern()))
			continue
		}
		var op apiOperation
		if err := node.Decode(&op); err != nil {
			problems = append(problems, fmt.Sprintf("route %s: %v", r.Pattern(), err))
			continue
		}
		problems = append(problems, compareAccess(r, op, doc)...)
		if got := idempotencyOf(op, doc); got != r.Idempotency {
			problems = append(problems, fmt.Sprintf("route %s takes Idempotency-Key %s; the document says %s", r.Pattern(), r.Idempotency, got))
		}
		for _, status := range []string{"400", "413"} {
			if _, ok := op.Responses[status]; r.Bodiless && !ok {
				problems = append(problems, fmt.Sprintf("route %s refuses a body; the document lists no %s", r.Pattern(), status))
			}
		}
	}
	for path, item := range doc.Paths {
		for method := range item {
			if !slices.Contains(openAPIMethods, method) {
				continue
			}
			if _, ok := served[method+" "+path]; ok {
				continue
			}
			if slices.ContainsFunc(subtrees, func(prefix string) bool { return strings.HasPrefix(path, prefix) }) {
				continue
			}
			problems = append(problems, fmt.Sprintf("document %s %s: no such route", method, path))
		}
	}
	sort.Strings(problems)
	return problems
}

func compareAccess(r httpapi.Route, op apiOperation, doc *apiDoc) []string {
	security := doc.Security
	if op.Security != nil {
		security = *op.Security
	}
	needsBearer := slices.ContainsFunc(security, func(req map[string][]string) bool { _, ok := req["bearer"]; return ok })
	if r.Roles == nil {
		if len(security) != 0 || len(op.Roles) != 0 {
			return []string{fmt.Sprintf("route %s is public; the document asks for %v %v", r.Pattern(), security, op.Roles)}
		}
		return nil
	}
	got, want := slices.Sorted(slices.Values(op.Roles)), slices.Sorted(slices.Values(r.Roles))
	if !needsBearer || !slices.Equal(got, want) {
		return []string{fmt.Sprintf("route %s needs a bearer token of %v; the document says security %v, x-roles %v",
			r.Pattern(), want, security, got)}
	}
	return nil
}

// idempotencyOf is what op's parameters say of the Idempotency-Key header.
func idempotencyOf(op apiOperation, doc *apiDoc) httpapi.Idempotency {
	for _, p := range op.Parameters {
		if ref, ok := p["$ref"].(string); ok {
			r, err := resolve(doc.raw, ref)
			if err != nil {
				continue // checkDocument reports it
			}
			p, _ = r.(map[string]any)
		}
		if p["in"] != "header" || !strings.EqualFold(fmt.Sprint(p["name"]), "Idempotency-Key") {
			continue
		}
		if p["required"] == true {
			return httpapi.KeyRequired
		}
		return httpapi.KeyOptional
	}
	return httpapi.NoKey
}

var pathParamRe = regexp.MustCompile(`\{([^}]+)\}`)

// checkDocument checks what a reader of the document relies on: every $ref
// resolves, every path template's parameters are declared, and the problem
// codes and their statuses are exactly those of the server's table.
func checkDocument(doc *apiDoc) []string {
	var problems []string
	walk(doc.raw, "", func(where string, m map[string]any) {
		ref, ok := m["$ref"].(string)
		if !ok {
			return
		}
		if _, err := resolve(doc.raw, ref); err != nil {
			problems = append(problems, fmt.Sprintf("%s: $ref %s: %v", where, ref, err))
		}
	})

	paths, _ := doc.raw["paths"].(map[string]any)
	for path, item := range paths {
		ops, _ := item.(map[string]any)
		for method, op := range ops {
			opm, ok := op.(map[string]any)
			if !ok || !slices.Contains(openAPIMethods, method) {
				continue
			}
			declared := map[string]bool{}
			params, _ := opm["parameters"].([]any)
			for _, p := range params {
				pm, _ := p.(map[string]any)
				if ref, ok := pm["$ref"].(string); ok {
					r, err := resolve(doc.raw, ref)
					if err != nil {
						continue // reported above
					}
					pm, _ = r.(map[string]any)
				}
				if pm["in"] == "path" {
					declared[fmt.Sprint(pm["name"])] = true
				}
			}
			for _, m := range pathParamRe.FindAllStringSubmatch(path, -1) {
				if !declared[m[1]] {
					problems = append(problems, fmt.Sprintf("%s %s: path parameter {%s} not declared", method, path, m[1]))
				}
			}
		}
	}

	code, err := resolve(doc.raw, "#/components/schemas/ProblemCode")
	if err != nil {
		return append(problems, fmt.Sprintf("ProblemCode: %v", err))
	}
	want := map[string]int{"internal": http.StatusInternalServerError}
	for c, status := range httpapi.StatusOf() {
		want[string(c)] = status
	}
	cm, _ := code.(map[string]any)
	enum, _ := cm["enum"].([]any)
	statuses, _ := cm["x-statuses"].(map[string]any)
	got := map[string]int{}
	for _, e := range enum {
		got[fmt.Sprint(e)] = -1
	}
	for c, s := range statuses {
		if _, ok := got[c]; !ok {
			problems = append(problems, fmt.Sprintf("ProblemCode: x-statuses has %s, which enum lacks", c))
		}
		n, _ := strconv.Atoi(fmt.Sprint(s))
		got[c] = n
	}
	for c, status := range want {
		if got[c] != status {
			problems = append(problems, fmt.Sprintf("ProblemCode %s: documented status %d, the server answers %d", c, got[c], status))
		}
	}
	for c := range got {
		if _, ok := want[c]; !ok {
			problems = append(problems, fmt.Sprintf("ProblemCode %s: documented, but the server has no such code", c))
		}
	}
	return problems
}

// walk calls f on every mapping of the decoded document.
func walk(v any, where string, f func(string, map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		f(where, x)
		for k, c := range x {
			walk(c, where+"/"+k, f)
		}
	case []any:
		for i, c := range x {
			walk(c, fmt.Sprintf("%s[%d]", where, i), f)
		}
	}
}

// resolve follows a local JSON pointer ("#/components/schemas/Booking").
func resolve(root map[string]any, ref string) (any, error) {
	ptr, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("not a local reference")
	}
	var cur any = root
	for _, tok := range strings.Split(ptr, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s is not an object", tok)
		}
		if cur, ok = m[tok]; !ok {
			return nil, fmt.Errorf("no %s", tok)
		}
	}
	return cur, nil
}
