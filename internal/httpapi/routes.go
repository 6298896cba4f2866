package httpapi

import (
	"net/http"
	"slices"
	"strings"
)

// Route is one pattern the server routes, as registered on its mux.
type Route struct {
	// Method is the pattern's method ("GET", "POST", …), or "" for a
	// pattern that takes every method (a mounted handler such as /paysim/).
	Method string
	// Path is the pattern's path, with its {wildcards}; a path ending in
	// "/" (other than "/" itself, the exact root) is a subtree.
	Path string
	// Roles are the roles a bearer token needs; nil for a route without
	// authentication (public, or signed like the payment webhook).
	Roles []string
}

// Pattern returns r as written on the mux: "GET /flights/{id}".
func (r Route) Pattern() string {
	path := r.Path
	if path == "/" {
		path = "/{$}"
	}
	if r.Method == "" {
		return path
	}
	return r.Method + " " + path
}

// Routes returns every route the server serves, sorted by path then
// method: the list the OpenAPI document (GET /openapi.yaml) must describe,
// and the test holds it to.
func (s *Server) Routes() []Route {
	out := make([]Route, 0, len(s.mux.routes))
	for _, r := range s.mux.routes {
		r.Roles = slices.Clone(r.Roles)
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Route) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
	return out
}

// routeMux is an http.ServeMux that remembers what was registered on it,
// since ServeMux cannot list its patterns. Everything is registered in New,
// before the server serves, so the list needs no lock.
type routeMux struct {
	*http.ServeMux
	routes []Route
}

func newRouteMux() *routeMux { return &routeMux{ServeMux: http.NewServeMux()} }

// Handle registers h for pattern and remembers the pattern.
func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.ServeMux.Handle(pattern, h)
	m.remember(pattern)
}

// HandleFunc registers h for pattern and remembers the pattern.
func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.ServeMux.HandleFunc(pattern, h)
	m.remember(pattern)
}

func (m *routeMux) remember(pattern string) {
	r := Route{Path: pattern}
	if method, path, ok := strings.Cut(pattern, " "); ok {
		r.Method, r.Path = method, strings.TrimSpace(path)
	}
	// "{$}" only tells the mux that "/" is exact, not a subtree; the
	// route's path is "/".
	if r.Path == "/{$}" {
		r.Path = "/"
	}
	m.routes = append(m.routes, r)
}

// allow records who may call the route just registered for pattern.
func (m *routeMux) allow(pattern string, who access) {
	for i := range m.routes {
		if m.routes[i].Pattern() == pattern {
			m.routes[i].Roles = slices.Clone([]string(who))
		}
	}
}
