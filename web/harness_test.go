package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/app/apptest"
)

// The browser tests drive berth's web app in headless Chromium, against a
// real berth (in this process, on a fresh PostgreSQL database), through
// the hooks outside test suites use: data-seat, data-status,
// data-booking-status, data-hold-expires, data-action and role="alert".
// One Chromium serves every test; each test opens its own tabs.

// installHint is what to install when Chromium is missing.
const installHint = "the browser tests need Chromium: apt-get install -y chromium (Debian), or set BERTH_CHROMIUM to a Chromium or Chrome binary"

var shared struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if path := os.Getenv("BERTH_AXE_REPORT"); path != "" {
		var lines []string
		axeResults.Range(func(k, v any) bool {
			found := strings.Join(v.([]string), ", ")
			if found == "" {
				found = "no violation"
			}
			lines = append(lines, fmt.Sprintf("%s: %s", k, found))
			return true
		})
		slices.Sort(lines)
		_ = os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	}
	if shared.cancel != nil {
		shared.cancel()
	}
	os.Exit(code)
}

func chromiumPath() string {
	if p := os.Getenv("BERTH_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser returns the shared Chromium, starting it on first use; it skips
// t when Chromium is not installed.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		t.Skip(installHint)
	}
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "berth-chromium-")
		if err != nil {
			shared.err = err
			return
		}
		// Without the background-networking flags, Chromium keeps trying
		// to reach Google's services, which a closed network turns into
		// stalls.
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(dir),
			chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-sync", true),
			chromedp.Flag("no-first-run", true), chromedp.WindowSize(1100, 900))
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, bcancel := chromedp.NewContext(actx)
		if err := chromedp.Do(bctx); err != nil {
			shared.err = fmt.Errorf("start %s: %w", path, err)
		}
		shared.ctx = bctx
		shared.cancel = func() { bcancel(); acancel(); _ = os.RemoveAll(dir) }
	})
	if shared.err != nil {
		t.Fatalf("chromium: %v", shared.err)
	}
	return shared.ctx
}

// env is one test's berth and its tabs.
type env struct {
	t   *testing.T
	srv *apptest.Server
}

// start runs berth with the development sign-in on, its clock at the real
// time (the browser's countdowns read the real clock) but moved only by the
// test.
func start(t *testing.T) *env {
	t.Helper()
	browser(t)
	srv := apptest.Start(t, apptest.Options{App: func(o *app.Options) { o.Dev = true }})
	srv.Clock.Set(time.Now().UTC().Truncate(time.Second))
	return &env{t: t, srv: srv}
}

// tab is one browser tab, signed in (or not), that records console errors
// and uncaught exceptions: a test fails on any of them.
type tab struct {
	e    *env
	ctx  context.Context
	name string
	mu   sync.Mutex
	errs []string
}

func (e *env) tab(name, role string, sub int64) *tab {
	e.t.Helper()
	ctx, cancel := chromedp.NewContext(shared.ctx)
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	tb := &tab{e: e, ctx: ctx, name: name}
	// Console errors, CSP and other security errors, uncaught exceptions,
	// and assets that failed to load fail the test. API answers such as a
	// 409 are expected (the page shows them) and do not.
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			switch {
			case m.IsException():
				tb.record("uncaught: " + m.Text)
			case m.Type == chromedp.ConsoleError && (m.Source != "network" || !isAPI(m.URL)):
				tb.record(fmt.Sprintf("console error (%s) %s: %s", m.Source, m.URL, m.Text))
			}
		}
	}()
	e.t.Cleanup(func() {
		if e.t.Failed() {
			tb.screenshot(failureDir(), fmt.Sprintf("%s-%s.png", strings.ReplaceAll(e.t.Name(), "/", "_"), name))
		}
		tb.mu.Lock()
		for _, msg := range tb.errs {
			e.t.Errorf("%s: %s", name, msg)
		}
		tb.mu.Unlock()
		cancelT()
		cancel()
	})
	tb.run(chromedp.EmulateViewport(1100, 900))
	if role != "" {
		tb.run(chromedp.Navigate(fmt.Sprintf("%s/dev/login?role=%s&sub=%d&next=/app/signin", e.srv.URL, role, sub)))
		tb.waitVisible(`#who button`)
	}
	return tb
}

func (tb *tab) record(msg string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.errs = append(tb.errs, msg)
}

// isAPI reports whether url is a call of the API (whose error answers the
// app shows as it should), not one of the app's own files.
func isAPI(url string) bool {
	return !strings.Contains(url, "/assets/") && !strings.Contains(url, "/app/") && !strings.HasSuffix(url, "/")
}

func failureDir() string {
	dir := filepath.Join(os.TempDir(), "berth-browser-failures")
	_ = os.MkdirAll(dir, 0o755)
	return dir
}

func (tb *tab) run(actions ...chromedp.Action[chromedp.Void]) {
	tb.e.t.Helper()
	if err := chromedp.Do(tb.ctx, actions...); err != nil {
		tb.e.t.Fatalf("%s: %v", tb.name, err)
	}
}

// open goes to path (a deep link) and waits for the element ready.
func (tb *tab) open(path, ready string) {
	tb.e.t.Helper()
	tb.run(chromedp.Navigate(tb.e.srv.URL + path))
	tb.waitVisible(ready)
}

func (tb *tab) waitVisible(sel string) {
	tb.e.t.Helper()
	tb.run(chromedp.WaitVisible(chromedp.CSS(sel)))
}

// askCancel presses a booking page's "Cancel booking" and waits for its
// question (the refund quote, "Yes, cancel" and "Keep it" come together).
func (tb *tab) askCancel() {
	tb.e.t.Helper()
	tb.click(`[data-action="cancel"]`)
	tb.waitVisible(`[data-refund-quote]`)
}

// joinWaitlist presses a flight page's "Join the waitlist" and waits for
// the place in line the page then shows.
func (tb *tab) joinWaitlist() {
	tb.e.t.Helper()
	tb.click(`[data-action="join-waitlist"]`)
	tb.waitFor("the place in line", `document.querySelector('[data-waitlist-status]')?.dataset.waitlistStatus === 'WAITING'`)
}

// escapeCancel closes the cancel question with Escape and waits until it
// is gone.
func (tb *tab) escapeCancel() {
	tb.e.t.Helper()
	tb.run(chromedp.KeyEvent(kb.Escape))
	tb.waitFor("Escape closing the question", `!document.querySelector('dialog')`)
}

// click clicks the element sel with the mouse, as a person would, once it
// is visible and scrolled to the middle of the window.
func (tb *tab) click(sel string) {
	tb.e.t.Helper()
	tb.run(chromedp.WaitVisible(chromedp.CSS(sel)))
	_ = eval[bool](tb, fmt.Sprintf(`new Promise(r => { document.querySelector(%q).scrollIntoView({block: 'center'}); requestAnimationFrame(() => requestAnimationFrame(() => r(true))) })`, sel))
	tb.run(chromedp.Click(chromedp.CSS(sel)))
}

func (tb *tab) text(sel string) string {
	tb.e.t.Helper()
	s, err := chromedp.Run(tb.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		tb.e.t.Fatalf("%s: text of %s: %v", tb.name, sel, err)
	}
	return s
}

// eval evaluates js (awaiting a promise) and decodes its value.
func eval[T any](tb *tab, js string) T {
	tb.e.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.e.t.Fatalf("%s: %s: %v", tb.name, js[:min(len(js), 80)], err)
	}
	return v
}

// waitFor waits until js is truthy.
func (tb *tab) waitFor(what, js string) {
	tb.e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// A page that is loading has no context to poll in yet: ask again.
		_, err := chromedp.Run(tb.ctx, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil {
			return
		}
		if time.Now().After(deadline) || tb.ctx.Err() != nil {
			tb.e.t.Fatalf("%s: waiting for %s: %v", tb.name, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitStatus waits until the page shows the booking in status.
func (tb *tab) waitStatus(status string) {
	tb.e.t.Helper()
	tb.waitFor("booking status "+status, fmt.Sprintf(`document.querySelector('[data-booking-status]')?.dataset.bookingStatus === %q`, status))
}

var axeSource = func() string {
	b, err := os.ReadFile(filepath.Join("testdata", "axe", "axe.min.js"))
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// axeResults records, per page, what axe found (BERTH_AXE_REPORT=file
// writes the list when the tests end).
var axeResults sync.Map

// check runs the checks every page must pass: axe reports no serious or
// critical violation, and at 390 px wide nothing scrolls sideways.
func (tb *tab) check(page string) {
	tb.e.t.Helper()
	tb.run(chromedp.EmulateViewport(390, 844))
	width := eval[int](tb, `new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(document.documentElement.scrollWidth))))`)
	tb.run(chromedp.EmulateViewport(1100, 900))
	// Let the layout settle at the restored size before anything clicks.
	_ = eval[bool](tb, `new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`)
	if width > 390 {
		tb.e.t.Errorf("%s: at 390 px wide the page is %d px wide (sideways scrolling)", page, width)
	}
	var violations []struct {
		ID     string `json:"id"`
		Impact string `json:"impact"`
		Help   string `json:"help"`
		Nodes  []struct {
			Target []any `json:"target"`
		} `json:"nodes"`
	}
	raw := eval[string](tb, axeSource+`;axe.run(document, {resultTypes: ['violations']}).then(r => JSON.stringify(r.violations))`)
	if err := json.Unmarshal([]byte(raw), &violations); err != nil {
		tb.e.t.Fatalf("axe: %v", err)
	}
	var summary []string
	for _, v := range violations {
		summary = append(summary, v.Impact+" "+v.ID)
		if v.Impact == "serious" || v.Impact == "critical" {
			tb.e.t.Errorf("%s: axe %s violation %s (%s) at %v", page, v.Impact, v.ID, v.Help, v.Nodes)
		}
	}
	axeResults.Store(page, summary)
}

// screenshot saves the tab (the whole page, or the element sel) as name
// in dir.
func (tb *tab) screenshot(dir, name string, sel ...string) {
	var buf []byte
	var err error
	if len(sel) > 0 {
		buf, err = chromedp.Run(tb.ctx, chromedp.Screenshot(chromedp.CSS(sel[0])))
	} else {
		buf, err = chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	}
	if err != nil {
		tb.e.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		tb.e.t.Logf("screenshot %s: %v", name, err)
		return
	}
	tb.e.t.Logf("screenshot: %s", path)
}

// docShot saves a screenshot for the README when BERTH_SCREENSHOTS names a
// folder.
func (tb *tab) docShot(name string, sel ...string) {
	if dir := os.Getenv("BERTH_SCREENSHOTS"); dir != "" {
		tb.screenshot(dir, name, sel...)
	}
}

// queuedFlight creates a flight (as flight(3, 5, 0)) whose waiting room
// lets one customer in a second, and queues customer first in it: whoever
// comes next waits behind.
func (e *env) queuedFlight(first int64) int64 {
	e.t.Helper()
	id := e.flight(3, 5, 0)
	e.srv.Admin().SetWaitingRoom(e.t, id, true, 1)
	if _, p := e.srv.Customer(first).TryHoldQuantity(e.t, id, "ECONOMY", 1); !p.Is(http.StatusTooManyRequests, "waiting_room") {
		e.t.Fatalf("first hold: %v, want 429 waiting_room", p)
	}
	return id
}

// flight creates a flight from SGN to HAN departing in days, with rows of
// seats A–F per class: business rows 1–2, economy rows 3…3+ecoRows-1.
func (e *env) flight(days, ecoRows, overbook int) int64 {
	e.t.Helper()
	dep := e.srv.Clock.Now().Add(time.Duration(days) * 24 * time.Hour).Truncate(time.Hour)
	seats := func(from, to int) []string {
		var out []string
		for r := from; r <= to; r++ {
			for _, l := range "ABCDEF" {
				out = append(out, fmt.Sprintf("%d%c", r, l))
			}
		}
		return out
	}
	eco := seats(3, 2+ecoRows)
	return e.srv.Admin().CreateFlight(e.t, apptest.Flight{Code: "BT101", DepartureAt: dep, Fares: []apptest.Fare{
		{Class: "BUSINESS", Price: 4_800_000, Capacity: 12, Seats: seats(1, 2)},
		{Class: "ECONOMY", Price: 1_200_000, Capacity: len(eco), OverbookLimit: overbook, Seats: eco},
	}}).ID
}
