package bench

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Columns of the outcome table: the outcomes the issue asks to see, each
// column summing the outcomes it matches.
var tableColumns = []struct {
	head  string
	match func(string) bool
}{
	{"2xx", func(o string) bool { return o == "200" || o == "201" }},
	{"409 seat", is("409 seat_unavailable")},
	{"409 sold", is("409 sold_out")},
	{"409 car", is("409 car_unavailable")},
	{"429 wait", is("429 waiting_room")},
	{"429 rate", is("429 rate_limited")},
	{"503 over", is("503 overloaded")},
	{"5xx", isServerError},
	{"transport", isTransport},
	{"cut/unsent", func(o string) bool { return o == OutcomeUnsent || o == OutcomeCutOff }},
	{"other", func(o string) bool { return !known(o) }},
}

func is(want string) func(string) bool { return func(o string) bool { return o == want } }

func known(o string) bool {
	switch {
	case o == "200" || o == "201" || isServerError(o) || isTransport(o) || o == OutcomeUnsent || o == OutcomeCutOff:
		return true
	}
	for _, k := range knownOutcomes {
		if k == o {
			return true
		}
	}
	return false
}

func columnCount(outcomes []OutcomeStat, match func(string) bool) int {
	n := 0
	for _, s := range outcomes {
		if match(s.Outcome) {
			n += s.Count
		}
	}
	return n
}

// WriteTable prints the report for a terminal: both modes side by side.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\nberth bench %s — %s\n", r.Scenario, r.Describe())
	fmt.Fprintf(w, "machine: %d CPUs (GOMAXPROCS %d), %s, PostgreSQL %s, Redis %s; berth and the load generator share the CPUs.\n",
		r.Machine.NumCPU, r.Machine.GOMAXPROCS, r.Machine.GoVersion, r.Machine.PostgreSQL, r.Machine.Redis)
	if r.Machine.LoadStart != "" {
		fmt.Fprintf(w, "load average (1, 5, 15 min): %s at the start, %s at the end\n", r.Machine.LoadStart, r.Machine.LoadEnd)
	}

	fmt.Fprintf(w, "\nOPEN LOOP (latency from each request's scheduled time; follow-ups from their own send time;\n")
	fmt.Fprintf(w, "answers/s and holds/s over the time until the last answer; cut/unsent: still unanswered when the drain time ran out)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"mode", "op", "offered/s", "answers/s", "holds/s"}
	for _, c := range tableColumns {
		head = append(head, c.head)
	}
	head = append(head, "p50 ms", "p90 ms", "p99 ms", "max ms", "")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, m := range r.Modes {
		if m.Open == nil {
			continue
		}
		for _, op := range m.Open.Ops {
			name := op.Op
			offered := "-"
			if op.Scheduled {
				offered = fmt.Sprintf("%.0f", op.OfferedPerSec)
			} else {
				name += " (follow-up)"
			}
			holds := "-"
			if strings.Contains(op.Op, "hold") {
				holds = fmt.Sprintf("%.1f", float64(op.Count("201"))/m.Open.Window)
			}
			row := []string{m.Name, name, offered, fmt.Sprintf("%.0f", op.AnswersPerSec), holds}
			for _, c := range tableColumns {
				row = append(row, fmt.Sprint(columnCount(op.Outcomes, c.match)))
			}
			row = append(row, num(op.Latency.P50), num(op.Latency.P90), num(op.Latency.P99), num(op.Latency.Max), "")
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
	}
	_ = tw.Flush()

	fmt.Fprintf(w, "\nLATENCY BY OUTCOME (ms)\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\top\toutcome\tcount\tp50\tp90\tp99\tmax\t")
	for _, m := range r.Modes {
		if m.Open == nil {
			continue
		}
		for _, op := range m.Open.Ops {
			for _, s := range op.Outcomes {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t\n", m.Name, op.Op, s.Outcome, s.Count,
					num(s.Latency.P50), num(s.Latency.P90), num(s.Latency.P99), num(s.Latency.Max))
			}
		}
	}
	_ = tw.Flush()

	r.writeSeconds(w)
	r.writeSlices(w)
	r.writeMoney(w)

	if names := r.closedNames(); len(names) > 0 {
		fmt.Fprintf(w, "\nCLOSED LOOP (each client sends its next request when the previous is answered)\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		row := []string{"measurement", "clients"}
		for _, m := range r.Modes {
			row = append(row, m.Name+" good/s", "p50 ms", "p99 ms", "other answers")
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		for _, name := range names {
			row := []string{name, ""}
			for _, m := range r.Modes {
				c := m.Measurement(name)
				switch {
				case c == nil:
					row = append(row, "-", "-", "-", "-")
					continue
				case c.Skipped != "":
					row = append(row, "n/a", "-", "-", "-")
					continue
				}
				row[1] = fmt.Sprint(c.Clients)
				row = append(row, fmt.Sprintf("%.0f", c.GoodPerSec), num(c.Latency.P50), num(c.Latency.P99), otherAnswers(c))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		_ = tw.Flush()
	}

	var db []string
	for _, m := range r.Modes {
		for _, c := range m.Closed {
			if c.DB != nil {
				db = append(db, fmt.Sprintf("  %-14s %-15s %3d client(s): %.2f commits/hold, %.3f rollbacks/hold, %.1f round trips/hold",
					m.Name, c.Name, c.Clients, c.DB.CommitsPerHold, c.DB.RollbacksPerHold, c.DB.RoundTripsPerHold))
			}
		}
	}
	if len(db) > 0 {
		fmt.Fprintf(w, "\nDATABASE WORK PER HOLD (pg_stat_database commits and rollbacks of every session, berth's round trips; hot-flight loops)\n")
		fmt.Fprintln(w, strings.Join(db, "\n"))
	}

	r.writeMemory(w)

	fmt.Fprintf(w, "\nAUDIT (internal/audit on each mode's database after berth stopped)\n")
	for _, m := range r.Modes {
		fmt.Fprintf(w, "  %-14s %s\n", m.Name, m.auditLine())
	}

	if len(r.Targets) > 0 {
		fmt.Fprintf(w, "\nTARGETS OF ISSUES 6 AND 14 (informational; only invariants and 5xx fail the run)\n")
		for _, t := range r.Targets {
			fmt.Fprintf(w, "  [%s] %s: %s\n", t.verdict(), t.Name, t.Value)
		}
	}

	var notes []string
	for _, m := range r.Modes {
		for k, v := range m.Features {
			notes = append(notes, fmt.Sprintf("%s: %s: %s", m.Name, k, v))
		}
		for _, n := range m.Notes {
			notes = append(notes, m.Name+": "+n)
		}
	}
	if len(notes) > 0 {
		slices.Sort(notes)
		fmt.Fprintf(w, "\nNOTES\n")
		for _, n := range notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	if len(r.Failures) > 0 {
		fmt.Fprintf(w, "\nFAILED\n")
		for _, f := range r.Failures {
			fmt.Fprintf(w, "  %s\n", f)
		}
	} else {
		fmt.Fprintf(w, "\nPASSED: nothing oversold, every invariant holds, no 5xx but 503 overloaded.\n")
	}
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func otherAnswers(c *ClosedResult) string {
	var parts []string
	for _, s := range c.Outcomes {
		if s.Outcome != c.GoodOutcome {
			parts = append(parts, fmt.Sprintf("%s×%d", s.Outcome, s.Count))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Describe says what was offered, in a line.
func (r *Report) Describe() string {
	s := r.Settings
	switch r.Scenario {
	case FlashSale:
		return fmt.Sprintf("%s flights × %d seats, %s holds/s offered for %s (zipf %s, %s seat holds, %s pay, waiting room %s)",
			s["flights"], SeatsPerFlight, s["rate"], s["duration"], s["zipf"], s["seatShare"], s["payShare"], s["waitingRoom"])
	case CarPeak:
		return fmt.Sprintf("%s cars, %s searches/s and %s holds/s offered for %s", s["cars"], s["searchRate"], s["carHoldRate"], s["duration"])
	}
	return ""
}

func (r *Report) closedNames() []string {
	var names []string
	seen := map[string]bool{}
	for _, m := range r.Modes {
		for _, c := range m.Closed {
			if !seen[c.Name] {
				seen[c.Name] = true
				names = append(names, c.Name)
			}
		}
	}
	return names
}

func (m *Mode) auditLine() string {
	switch {
	case !m.Audit.Ran:
		return "DID NOT RUN: " + m.Audit.Error
	case m.Audit.OK:
		var ids []string
		for _, r := range m.Audit.Results {
			ids = append(ids, r.ID)
		}
		return "ok (" + strings.Join(ids, ", ") + " hold)"
	}
	var bad []string
	for _, r := range m.Audit.Results {
		if !r.OK {
			bad = append(bad, fmt.Sprintf("%s ×%d", r.ID, r.Count))
		}
	}
	return "VIOLATED: " + strings.Join(bad, ", ")
}

// writeSeconds prints the p99 of all answers in each second of each mode's
// open loop, the first second apart: a sale is judged from its first
// second.
func (r *Report) writeSeconds(w io.Writer) {
	var rows []string
	for _, m := range r.Modes {
		if m.Open == nil || len(m.Open.Series) == 0 {
			continue
		}
		first, worst, at, over := secondsP99(m.Open)
		per := make([]string, len(m.Open.Series))
		for i, s := range m.Open.Series {
			per[i] = num(s.Latency.P99)
		}
		rows = append(rows, fmt.Sprintf("%s\t%s\t%s (s%d)\t%d/%d\t%s\t", m.Name, num(first), num(worst), at+1, over, len(m.Open.Series), strings.Join(per, " ")))
	}
	writeSection(w, "P99 OF ALL ANSWERS PER SECOND (ms, by the second the answer came in; follow-ups included)",
		"mode\tfirst s\tworst s\ts ≥ 100ms\teach second\t", 0, rows)
}

// writeSlices prints, for each operation of each mode, the requests sent in
// each 100 ms of the first 2 seconds: how many, and their p50 and p99 —
// a sale's cold start next to the work itself.
func (r *Report) writeSlices(w io.Writer) {
	var rows []string
	for _, m := range r.Modes {
		if m.Open == nil {
			continue
		}
		ops := make([]string, 0, len(m.Open.FirstSlices))
		for op := range m.Open.FirstSlices {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		for _, op := range ops {
			var n, p50, p99 []string
			for _, s := range m.Open.FirstSlices[op] {
				n = append(n, strconv.Itoa(s.Count))
				p50 = append(p50, num(s.Latency.P50))
				p99 = append(p99, num(s.Latency.P99))
			}
			rows = append(rows, fmt.Sprintf("%s\t%s\tcount\t%s\t", m.Name, op, strings.Join(n, " ")),
				fmt.Sprintf("%s\t%s\tp50\t%s\t", m.Name, op, strings.Join(p50, " ")),
				fmt.Sprintf("%s\t%s\tp99\t%s\t", m.Name, op, strings.Join(p99, " ")))
		}
	}
	writeSection(w, "FIRST 2 SECONDS BY 100 MS (requests by the slice they were scheduled or sent in; latency in ms)",
		"mode\top\t\t0.0s 0.1s … 1.9s\t", 0, rows)
}

// writeMoney prints the flash sale's payment starts and webhooks, and how
// many were shed.
func (r *Report) writeMoney(w io.Writer) {
	var rows []string
	for _, m := range r.Modes {
		if m.Money == nil {
			continue
		}
		hooks := fmt.Sprintf("%d\t%d", m.Money.Webhooks, m.Money.Webhook503)
		if m.Money.WebhookError != "" {
			hooks = "?\t? (" + m.Money.WebhookError + ")"
		}
		rows = append(rows, fmt.Sprintf("%s\t%d\t%d\t%s\t", m.Name, m.Money.PayStarts, m.Money.Pay503, hooks))
	}
	writeSection(w, "MONEY (payment starts as the customers saw them; the gateway's webhooks from berth's metrics, every process)",
		"mode\tpayment starts\t503\twebhooks\t503\t", tabwriter.AlignRight, rows)
}

// writeMemory prints each berth process's resident memory over its mode.
func (r *Report) writeMemory(w io.Writer) {
	var rows []string
	for _, m := range r.Modes {
		for i, p := range m.Memory {
			where := fmt.Sprintf("#%d pid %d", i+1, p.PID)
			if p.InBench {
				where += " (in the bench's process: the load generator included)"
			}
			rows = append(rows, fmt.Sprintf("%s\t%s\t%.1f\t%.1f (at %.0fs)\t%.1f\t%d\t", m.Name, where,
				mb(p.StartKB), mb(p.MaxKB), p.MaxAt, mb(p.EndKB), p.Samples))
		}
	}
	writeSection(w, "MEMORY (VmRSS of each berth process, MB, sampled every 200 ms from its start to its stop)",
		"mode\tprocess\tstart\tmax\tend\tsamples\t", 0, rows)
	rows = rows[:0]
	for _, m := range r.Modes {
		for i, p := range m.Memory {
			rows = append(rows, fmt.Sprintf("%s\t#%d\t%s\t", m.Name, i+1, perSecondMB(p.PerSecondKB)))
		}
	}
	writeSection(w, "MEMORY OVER TIME (largest VmRSS of each second from the process's start, MB)",
		"mode\tprocess\tsecond 0, 1, 2, …\t", 0, rows)
}

// perSecondMB writes a series of kB figures as whole MB, space-separated,
// and a second without a sample as "-".
func perSecondMB(kbs []int64) string {
	var b strings.Builder
	for i, kb := range kbs {
		if i > 0 {
			b.WriteByte(' ')
		}
		if kb == 0 {
			b.WriteByte('-')
			continue
		}
		fmt.Fprintf(&b, "%.0f", mb(kb))
	}
	return b.String()
}

// writeSection prints a titled table of tab-separated rows under header,
// nothing when there are no rows.
func writeSection(w io.Writer, title, header string, flags uint, rows []string) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', flags)
	fmt.Fprintln(tw, header)
	for _, row := range rows {
		fmt.Fprintln(tw, row)
	}
	_ = tw.Flush()
}

func mb(kb int64) float64 { return float64(kb) / 1024 }
