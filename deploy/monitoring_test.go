package deploy

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// berthMetrics finds the metrics berth registers: the Name of every
// prometheus *Opts literal in internal/, read from the source, with the
// series a histogram adds.
func berthMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir("../internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if prefix, ok := coalesceMetric(lit); ok {
				// coalesce.New names its metrics from Config.Metric, and
				// adds a gauge when the config sets a Target.
				for _, name := range []string{"_size_bucket", "_size_sum", "_size_count", "_fallbacks_total", "_shed_total"} {
					names[prefix+name] = true
				}
				if field(lit, "Target") != nil {
					names[prefix+"_standing"] = true
				}
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
				return true
			}
			if name, ok := stringField(lit, "Name"); ok {
				names[name] = true
				if sel.Sel.Name == "HistogramOpts" {
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						names[name+suffix] = true
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 20 {
		t.Fatalf("found only %d metrics in internal/: the scan is broken", len(names))
	}
	return names
}

// coalesceMetric is the Metric of a coalesce.Config[…] literal.
func coalesceMetric(lit *ast.CompositeLit) (string, bool) {
	idx, ok := lit.Type.(*ast.IndexListExpr)
	if !ok {
		return "", false
	}
	if sel, ok := idx.X.(*ast.SelectorExpr); !ok || sel.Sel.Name != "Config" {
		return "", false
	}
	return stringField(lit, "Metric")
}

// field is the value a composite literal gives its field key, or nil.
func field(lit *ast.CompositeLit, key string) ast.Expr {
	for _, e := range lit.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok && kv.Key.(*ast.Ident).Name == key {
			return kv.Value
		}
	}
	return nil
}

// stringField is the string constant a composite literal gives its field
// key, if it gives one.
func stringField(lit *ast.CompositeLit, key string) (string, bool) {
	s, ok := field(lit, key).(*ast.BasicLit)
	if !ok {
		return "", false
	}
	v, err := strconv.Unquote(s.Value)
	return v, err == nil
}

var metricRef = regexp.MustCompile(`\b(berth_[a-z0-9_]+|go_[a-z0-9_]+|process_[a-z0-9_]+)\b`)

// runtimeMetrics are the Go and process collectors' series that berth
// registers (internal/app) and the dashboard uses.
var runtimeMetrics = []string{"go_goroutines", "process_resident_memory_bytes"}

func checkExprs(t *testing.T, where string, exprs []string, known map[string]bool) {
	t.Helper()
	for _, e := range exprs {
		for _, m := range metricRef.FindAllString(e, -1) {
			if !known[m] && !slices.Contains(runtimeMetrics, m) {
				t.Errorf("%s: %s uses %s, which berth does not export", where, e, m)
			}
		}
		if !metricRef.MatchString(e) {
			t.Errorf("%s: %s uses no berth metric", where, e)
		}
	}
}

type alertRules struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Alert       string
			Expr        string
			Labels      map[string]string
			Annotations map[string]string
		}
	}
}

func TestAlertsUseBerthMetricsAndHaveRunbooks(t *testing.T) {
	known := berthMetrics(t)
	b, err := os.ReadFile("monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkExprs(t, r.Alert, []string{r.Expr}, known)
			if s := r.Labels["severity"]; s != "page" && s != "warn" {
				t.Errorf("%s: severity %q, want page or warn", r.Alert, s)
			}
			anchor := "#" + strings.ToLower(r.Alert)
			if r.Annotations["runbook"] != "docs/operations.md"+anchor {
				t.Errorf("%s: runbook annotation %q, want docs/operations.md%s", r.Alert, r.Annotations["runbook"], anchor)
			}
			if !regexp.MustCompile(`(?m)^#+ ` + r.Alert + `\s*$`).Match(ops) {
				t.Errorf("%s: docs/operations.md has no runbook heading for it", r.Alert)
			}
		}
	}
	// What the issue asks alerts for.
	for _, want := range []string{"BerthOutboxBacklogOld", "BerthConsumerLagHigh", "BerthEventsParked", "BerthRefundsFailing", "BerthHigh5xxRate", "BerthAuditViolation"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s", want)
		}
	}
}

func TestDashboardUsesBerthMetrics(t *testing.T) {
	known := berthMetrics(t)
	b, err := os.ReadFile("monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string
		Panels []struct {
			ID      int
			Type    string
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	ids := map[int]bool{}
	var all []string
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		var exprs []string
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
		if len(exprs) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		checkExprs(t, "panel "+strconv.Quote(p.Title), exprs, known)
		all = append(all, exprs...)
	}
	// What the issue asks the dashboard to show.
	joined := strings.Join(all, "\n")
	for _, want := range []string{"berth_holds_total", "berth_http_request_duration_seconds_bucket", "berth_hold_batch_size_bucket",
		"berth_guard_admitted_total", "berth_outbox_backlog_events", "berth_outbox_oldest_unpublished_seconds",
		"berth_consumer_lag_seconds_bucket", "berth_refunds_total", `status=~"5.."`, "berth_audit_violations"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the dashboard shows nothing of %s", want)
		}
	}
}
