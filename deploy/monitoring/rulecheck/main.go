// Command rulecheck checks Prometheus rule files with Prometheus's own
// parser (model/rulefmt, the code behind `promtool check rules`): YAML
// structure, the PromQL of every expression, label and annotation
// templates, duplicate rules. Given --dashboard, it also parses the PromQL
// of every target of a Grafana dashboard. It is its own module so berth's
// go.mod does not carry Prometheus's server code.
//
//	cd deploy/monitoring/rulecheck && go run . --dashboard ../dashboard.json ../alerts.yaml
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	dashboard := flag.String("dashboard", "", "a Grafana dashboard JSON whose PromQL to check as well")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: rulecheck [--dashboard file.json] <rules.yaml>…")
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	failed := false
	for _, file := range flag.Args() {
		groups, errs := rulefmt.ParseFile(file, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
		for _, err := range errs {
			fmt.Fprintf(os.Stderr, "%s: %v\n", file, err)
			failed = true
		}
		if groups == nil || len(errs) > 0 {
			continue
		}
		n := 0
		for _, g := range groups.Groups {
			n += len(g.Rules)
		}
		fmt.Printf("%s: %d groups, %d rules: SUCCESS\n", file, len(groups.Groups), n)
	}
	if *dashboard != "" {
		n, err := checkDashboard(p, *dashboard)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", *dashboard, err)
			failed = true
		} else {
			fmt.Printf("%s: %d queries: SUCCESS\n", *dashboard, n)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// grafanaVars are the dashboard variables, replaced by values PromQL
// accepts before parsing.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

func checkDashboard(p parser.Parser, file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return 0, err
	}
	n := 0
	var errs []string
	for _, panel := range d.Panels {
		for _, t := range panel.Targets {
			n++
			if _, err := p.ParseExpr(grafanaVars.Replace(t.Expr)); err != nil {
				errs = append(errs, fmt.Sprintf("panel %q: %s: %v", panel.Title, t.Expr, err))
			}
		}
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return n, nil
}
