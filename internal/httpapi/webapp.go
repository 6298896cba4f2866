package httpapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"berth.dev/berth/internal/auth"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/seed"
	"berth.dev/berth/web"
)

// asset is one embedded file, with the ETag that lets browsers revalidate
// it cheaply (the files change only with the binary).
type asset struct {
	body  []byte
	etag  string
	ctype string
}

func loadAssets() map[string]asset {
	out := map[string]asset{}
	err := fs.WalkDir(web.Static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(web.Static, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[strings.TrimPrefix(p, "static/")] = asset{body: b, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: contentType(p)}
		return nil
	})
	if err != nil {
		panic("web: the embedded files cannot be read: " + err.Error())
	}
	return out
}

func contentType(p string) string {
	switch path.Ext(p) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	}
	return "application/octet-stream"
}

// appPolicy is the web app's Content-Security-Policy: everything from
// berth itself, nothing inline, never framed.
const appPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

func (s *Server) serveAsset(w http.ResponseWriter, r *http.Request, name string) error {
	a, ok := s.assets[name]
	if !ok {
		return fault.New(fault.NotFound, "no such resource: %s", r.URL.Path)
	}
	h := w.Header()
	h.Set("Content-Type", a.ctype)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	if strings.HasSuffix(name, ".html") {
		h.Set("Content-Security-Policy", appPolicy)
		h.Set("Referrer-Policy", "no-referrer")
	}
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	return nil
}

// appShell serves index.html for / and every /app/... path: the app reads
// the path and shows the page it names.
func (s *Server) appShell(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	return s.serveAsset(w, r, "index.html")
}

func (s *Server) asset(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	name := strings.TrimPrefix(r.URL.Path, "/assets/")
	if name == "index.html" || name == "" {
		return fault.New(fault.NotFound, "no such resource: %s", r.URL.Path)
	}
	return s.serveAsset(w, r, name)
}

// devTokenTTL is how long a /dev/login token lasts.
const devTokenTTL = 12 * time.Hour

var devLoginTmpl = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in (development) · berth</title><link rel="stylesheet" href="/assets/app.css">
{{if .Token}}<meta name="berth-token" content="{{.Token}}"><meta name="berth-next" content="{{.Next}}">
<script type="module" src="/assets/js/devlogin.js"></script>{{end}}
</head><body><main id="main" class="narrow">
<h1>Sign in to berth (development)</h1>
{{if .Token}}<p>Signing you in as {{.Role}} {{.Sub}}… <a href="{{.Next}}">continue</a></p>
{{else}}<p>This page exists only in <code>berth dev</code>: act as any demo customer, host or admin.</p>
<ul class="links">
<li><a href="/dev/login?role=customer&amp;sub=1001">Customer 1001</a></li>
<li><a href="/dev/login?role=customer&amp;sub=1002">Customer 1002</a></li>
<li><a href="/dev/login?role=host&amp;sub={{.Host}}">Host {{.Host}}</a> (who has cars)</li>
<li><a href="/dev/login?role=admin&amp;sub=1">Admin 1</a></li></ul>
<form method="get" action="/dev/login" class="stack">
<label>Role <select name="role"><option>customer</option><option>host</option><option>admin</option></select></label>
<label>User id <input name="sub" type="number" min="1" value="1003" required></label>
<button type="submit">Sign in</button></form>{{end}}
</main></body></html>`))

// appPathRe is a page of the web app, with its query: printable URL
// characters only. A browser drops tabs and line breaks from an address,
// so "/\t/evil.example" would take it to another site.
var appPathRe = regexp.MustCompile(`^/app(/[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*)?$`)

// devLogin answers GET /dev/login (berth dev only). With role and sub it
// signs the browser in: the page stores a token for them in sessionStorage
// and goes on to next (a path of the app; by default the role's home).
// Without them it shows a form.
func (s *Server) devLogin(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	q := r.URL.Query()
	var data map[string]any
	if !q.Has("role") && !q.Has("sub") {
		// The form offers the demo host berth dev prints: one with cars.
		data = map[string]any{"Host": seed.DemoHost(r.Context(), s.Pool)}
	} else {
		role := q.Get("role")
		if !auth.ValidRole(role) {
			return fault.Invalid("role", "must be customer, host or admin")
		}
		sub, err := strconv.ParseInt(q.Get("sub"), 10, 64)
		if err != nil || sub < 1 || sub > auth.MaxID {
			return fault.Invalid("sub", "must be a user id from 1 to %d", auth.MaxID)
		}
		tok, err := auth.Issue(s.AuthSecret, sub, role, s.Clock.Now(), devTokenTTL)
		if err != nil {
			return err
		}
		next := q.Get("next")
		if !appPathRe.MatchString(next) {
			next = map[string]string{auth.Customer: "/app/", auth.Host: "/app/host", auth.Admin: "/app/admin"}[role]
		}
		data = map[string]any{"Token": tok, "Next": next, "Role": role, "Sub": sub}
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", appPolicy)
	h.Set("Referrer-Policy", "no-referrer")
	var buf bytes.Buffer
	if err := devLoginTmpl.Execute(&buf, data); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}
