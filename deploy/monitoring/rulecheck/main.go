// Command rulecheck checks Prometheus alerting and recording rule files
// with Prometheus's own parser (model/rulefmt, the code behind `promtool
// check rules`): YAML structure, PromQL of every expression, label and
// annotation templates, duplicate rule names. It is its own module so
// berth's go.mod does not carry Prometheus's server code.
//
//	cd deploy/monitoring/rulecheck && go run . ../alerts.yaml
package main

import (
	"fmt"
	"os"

	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rulecheck <rules.yaml>…")
		os.Exit(2)
	}
	failed := false
	for _, file := range os.Args[1:] {
		groups, errs := rulefmt.ParseFile(file, false, parser.NewParser(parser.Options{}))
		for _, err := range errs {
			fmt.Fprintf(os.Stderr, "%s: %v\n", file, err)
			failed = true
		}
		if groups == nil {
			continue
		}
		n := 0
		for _, g := range groups.Groups {
			n += len(g.Rules)
		}
		fmt.Printf("%s: %d groups, %d rules: SUCCESS\n", file, len(groups.Groups), n)
	}
	if failed {
		os.Exit(1)
	}
}
