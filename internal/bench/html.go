package bench

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"
)

// WriteHTML writes the report as one self-contained HTML page: tables, and
// inline SVG plots of throughput and latency percentiles over time by
// outcome, the modes side by side on shared scales. It loads nothing from
// anywhere.
func (r *Report) WriteHTML(w io.Writer) error {
	d := htmlData{R: r, Conclusions: r.Conclusions()}
	var tMax, lMax float64 = 1, 1
	var xMax float64 = 1
	for _, m := range r.Modes {
		if m.Open == nil {
			continue
		}
		xMax = max(xMax, float64(len(m.Open.Series)))
		for _, s := range m.Open.Series {
			for _, n := range s.Offered {
				tMax = max(tMax, float64(n))
			}
			for key, st := range s.Outcomes {
				if !isAnswer(key) {
					continue
				}
				tMax = max(tMax, float64(st.Count))
				lMax = max(lMax, st.Latency.P99)
			}
		}
	}
	lMax = math.Pow(10, math.Ceil(math.Log10(lMax)))
	for _, m := range r.Modes {
		hm := htmlMode{M: m}
		if m.Open != nil {
			tp, lat, legend := modeCharts(m.Open, xMax, tMax*1.05, lMax)
			hm.Throughput, hm.Latency, hm.Legend = tp.svg(), lat.svg(), legend
		}
		d.Modes = append(d.Modes, hm)
	}
	d.Closed = closedChart(r)
	if err := pageTmpl.Execute(w, d); err != nil {
		return fmt.Errorf("write HTML report: %w", err)
	}
	return nil
}

type htmlData struct {
	R           *Report
	Modes       []htmlMode
	Closed      template.HTML
	Conclusions []string
}

type htmlMode struct {
	M                   *Mode
	Throughput, Latency template.HTML
	Legend              []legendItem
}

type legendItem struct {
	Label, Color, Dash string
}

// colors of the outcomes, the same in every chart.
var outcomeColor = map[string]string{
	"200": "#0f766e", "201": "#16a34a",
	"409 seat_unavailable": "#f59e0b", "409 sold_out": "#a16207", "409 car_unavailable": "#ea580c",
	"429 waiting_room": "#2563eb", "429 rate_limited": "#7c3aed", "503 overloaded": "#dc2626",
	OutcomeTimeout: "#111827", OutcomeTransport: "#4b5563", OutcomeUnsent: "#9ca3af", OutcomeCutOff: "#6b7280", OutcomeSkipped: "#d1d5db",
}

var spareColors = []string{"#db2777", "#0891b2", "#65a30d", "#9333ea", "#c2410c", "#0369a1"}

func colorOf(outcome string) string {
	if c, ok := outcomeColor[outcome]; ok {
		return c
	}
	if isServerError(outcome) {
		return "#7f1d1d"
	}
	var h int
	for _, b := range []byte(outcome) {
		h = h*31 + int(b)
	}
	return spareColors[(h%len(spareColors)+len(spareColors))%len(spareColors)]
}

// isAnswer reports whether an "op outcome" key of the series is an answer
// (or a failed request), rather than a request the client never sent,
// gave up at the end, or skipped: those are plotted nowhere, since they
// would land in one spike at the end of the run.
func isAnswer(key string) bool {
	_, outcome, _ := strings.Cut(key, " ")
	return answered(outcome)
}

// dashOf draws follow-ups (payments, polls, retried holds) dashed, so they
// read apart from the scheduled requests of the same outcome.
func dashOf(scheduled bool) string {
	if scheduled {
		return ""
	}
	return "6 3"
}

// modeCharts builds a mode's throughput and latency charts.
func modeCharts(o *OpenResult, xMax, tMax, lMax float64) (tp, lat chart, legend []legendItem) {
	tp = chart{title: "answers per second by outcome (dashed grey: offered)", yTitle: "per second", xMax: xMax, yMax: tMax}
	lat = chart{title: "latency by outcome: p99 (thick), p50 (thin)", yTitle: "ms", xMax: xMax, yMin: 0.1, yMax: lMax, log: true}
	scheduled := map[string]bool{}
	for _, op := range o.Ops {
		scheduled[op.Op] = op.Scheduled
		if !op.Scheduled {
			continue
		}
		ln := line{label: "offered " + op.Op, color: "#6b7280", dash: "2 3", width: 1.5}
		for _, s := range o.Series {
			ln.pts = append(ln.pts, point{float64(s.T) + 0.5, float64(s.Offered[op.Op])})
		}
		tp.lines = append(tp.lines, ln)
	}
	var keys []string
	seen := map[string]bool{}
	for _, s := range o.Series {
		for k := range s.Outcomes {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	slices.SortFunc(keys, func(a, b string) int {
		ao, aout, _ := strings.Cut(a, " ")
		bo, bout, _ := strings.Cut(b, " ")
		if scheduled[ao] != scheduled[bo] {
			if scheduled[ao] {
				return -1
			}
			return 1
		}
		if ao != bo {
			return strings.Compare(ao, bo)
		}
		l := []string{aout, bout}
		sortOutcomes(l)
		if l[0] == aout {
			return -1
		}
		return 1
	})
	for _, k := range keys {
		if !isAnswer(k) {
			continue // not answers: the notes and tables count them
		}
		op, outcome, _ := strings.Cut(k, " ")
		color, dash := colorOf(outcome), dashOf(scheduled[op])
		legend = append(legend, legendItem{Label: k, Color: color, Dash: dash})
		count := line{label: k, color: color, dash: dash, width: 2}
		p99 := line{label: k + " p99", color: color, dash: dash, width: 2.2}
		p50 := line{label: k + " p50", color: color, dash: dash, width: 0.9}
		for _, s := range o.Series {
			x := float64(s.T) + 0.5
			st, ok := s.Outcomes[k]
			count.pts = append(count.pts, point{x, float64(st.Count)})
			if !ok {
				p99.pts = append(p99.pts, point{x, math.NaN()})
				p50.pts = append(p50.pts, point{x, math.NaN()})
				continue
			}
			p99.pts = append(p99.pts, point{x, st.Latency.P99})
			p50.pts = append(p50.pts, point{x, st.Latency.P50})
		}
		tp.lines = append(tp.lines, count)
		lat.lines = append(lat.lines, p50, p99)
	}
	legend = append(legend, legendItem{Label: "offered", Color: "#6b7280", Dash: "2 3"})
	return tp, lat, legend
}

type point struct{ x, y float64 }

type line struct {
	label, color, dash string
	width              float64
	pts                []point // NaN y: no value (a gap)
}

type chart struct {
	title, yTitle string
	xMax          float64
	yMin, yMax    float64
	log           bool
	lines         []line
}

const (
	chartW, chartH         = 560, 270
	padL, padR, padT, padB = 58, 12, 26, 34
	plotW, plotH           = chartW - padL - padR, chartH - padT - padB
	fontStyle              = `font-family="system-ui,sans-serif" font-size="11" fill="#374151"`
	gridStyle              = `stroke="#e5e7eb" stroke-width="1"`
	axisStyle              = `stroke="#9ca3af" stroke-width="1"`
)

var esc = template.HTMLEscapeString

func (c chart) xPix(x float64) float64 { return padL + x/c.xMax*plotW }

func (c chart) yPix(y float64) float64 {
	var f float64
	if c.log {
		y = min(max(y, c.yMin), c.yMax)
		f = (math.Log10(y) - math.Log10(c.yMin)) / (math.Log10(c.yMax) - math.Log10(c.yMin))
	} else {
		f = (y - c.yMin) / (c.yMax - c.yMin)
	}
	return padT + (1-f)*plotH
}

func (c chart) svg() template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="100%%" role="img" aria-label="%s">`, chartW, chartH, esc(c.title))
	fmt.Fprintf(&b, `<text x="%d" y="16" %s font-weight="600">%s</text>`, padL, fontStyle, esc(c.title))
	// y grid and labels
	for _, t := range c.yTicks() {
		y := c.yPix(t)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" %s/>`, padL, padL+plotW, y, y, gridStyle)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" %s>%s</text>`, padL-4, y+4, fontStyle, esc(tickLabel(t, c.log)))
	}
	// x grid and labels, in seconds
	step := niceStep(c.xMax / 8)
	for t := 0.0; t <= c.xMax+1e-9; t += step {
		x := c.xPix(t)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" %s/>`, x, x, padT, padT+plotH, gridStyle)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" %s>%gs</text>`, x, padT+plotH+14, fontStyle, t)
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" %s/>`, padL, padL+plotW, padT+plotH, padT+plotH, axisStyle)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" %s/>`, padL, padL, padT, padT+plotH, axisStyle)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" %s>%s</text>`, padL+plotW, chartH-4, fontStyle, "time into the run")
	fmt.Fprintf(&b, `<text transform="translate(12 %d) rotate(-90)" text-anchor="middle" %s>%s</text>`, padT+plotH/2, fontStyle, esc(c.yTitle))
	for _, ln := range c.lines {
		dash := ""
		if ln.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, ln.dash)
		}
		for _, seg := range segments(ln.pts) {
			var pts []string
			for _, p := range seg {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", c.xPix(p.x), c.yPix(p.y)))
			}
			if len(pts) == 1 {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"><title>%s</title></circle>`,
					c.xPix(seg[0].x), c.yPix(seg[0].y), ln.width+0.5, ln.color, esc(ln.label))
				continue
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f"%s stroke-linejoin="round" points="%s"><title>%s</title></polyline>`,
				ln.color, ln.width, dash, strings.Join(pts, " "), esc(ln.label))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built here from numbers and escaped labels
}

// segments splits a line at its gaps.
func segments(pts []point) [][]point {
	var out [][]point
	var cur []point
	for _, p := range pts {
		if math.IsNaN(p.y) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, p)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

func (c chart) yTicks() []float64 {
	var ticks []float64
	if c.log {
		for t := c.yMin; t <= c.yMax*1.0001; t *= 10 {
			ticks = append(ticks, t)
		}
		return ticks
	}
	step := niceStep((c.yMax - c.yMin) / 5)
	for t := c.yMin; t <= c.yMax+1e-9; t += step {
		ticks = append(ticks, t)
	}
	return ticks
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func tickLabel(v float64, latency bool) string {
	if latency {
		if v >= 1000 {
			return fmt.Sprintf("%gs", v/1000)
		}
		return fmt.Sprintf("%gms", v)
	}
	if v >= 1000 {
		return fmt.Sprintf("%gk", v/1000)
	}
	return fmt.Sprintf("%g", v)
}

// closedChart draws the closed-loop measurements as bars, one group per
// measurement, one bar per mode, each group on its own scale.
func closedChart(r *Report) template.HTML {
	names := r.closedNames()
	if len(names) == 0 {
		return ""
	}
	const rowH, barH, labelW, w = 22, 16, 210, 760
	modeColor := map[bool]string{false: "#9ca3af", true: "#2563eb"}
	h := padT + len(names)*(len(r.Modes)*rowH+14)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="100%%" role="img" aria-label="closed-loop measurements">`, w, h)
	fmt.Fprintf(&b, `<text x="0" y="16" %s font-weight="600">closed loops: good answers per second (each group on its own scale)</text>`, fontStyle)
	y := padT
	for _, name := range names {
		var top float64
		for _, m := range r.Modes {
			if c := m.Measurement(name); c != nil {
				top = max(top, c.GoodPerSec)
			}
		}
		for _, m := range r.Modes {
			c := m.Measurement(name)
			label := name + " · " + m.Name
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" %s>%s</text>`, labelW-6, y+barH-3, fontStyle, esc(label))
			switch {
			case c == nil:
			case c.Skipped != "":
				fmt.Fprintf(&b, `<text x="%d" y="%d" %s>not measured: %s</text>`, labelW, y+barH-3, fontStyle, esc(c.Skipped))
			default:
				bw := 0.0
				if top > 0 {
					bw = c.GoodPerSec / top * (w - labelW - 300)
				}
				fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, labelW, y, bw, barH, modeColor[m.Protect])
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s>%.0f/s (%s) · p99 %s</text>`, float64(labelW)+bw+6, y+barH-3, fontStyle,
					c.GoodPerSec, esc(c.GoodOutcome), esc(fmtMS(c.Latency.P99)))
			}
			y += rowH
		}
		y += 14
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built here from numbers and escaped labels
}

// Conclusions reads the plots for the reader: how each mode kept up with
// the offered load over time, where its latency peaked, and the targets.
func (r *Report) Conclusions() []string {
	var out []string
	for _, m := range r.Modes {
		o := m.Open
		if o == nil || len(o.Series) == 0 {
			continue
		}
		behind, peakAt := 0, 0
		var peak float64
		whole := 0
		for _, s := range o.Series {
			if float64(s.T) >= o.Duration {
				continue
			}
			whole++
			offered := 0
			for _, n := range s.Offered {
				offered += n
			}
			if offered > 0 && float64(s.Answered) < 0.9*float64(offered) {
				behind++
			}
			if s.Latency.P99 > peak {
				peak, peakAt = s.Latency.P99, s.T
			}
		}
		out = append(out, fmt.Sprintf("%s: answered %.0f/s of %.0f/s offered; it fell behind the offered load (answered < 90 %%) in %d of %d seconds; "+
			"p99 of all scheduled requests %s, the worst second's p99 %s at %ds; %.1f holds committed/s.",
			m.Name, o.AnswersPerSec, o.OfferedPerSec, behind, whole, fmtMS(o.Latency.P99), fmtMS(peak), peakAt, o.CommittedPerSec))
	}
	for _, t := range r.Targets {
		out = append(out, fmt.Sprintf("target [%s] %s: %s", strings.TrimSpace(t.verdict()), t.Name, t.Value))
	}
	return out
}

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"num": num, "ms": fmtMS,
	"col": func(outcomes []OutcomeStat, i int) int { return columnCount(outcomes, tableColumns[i].match) },
	"cols": func() []string {
		var out []string
		for _, c := range tableColumns {
			out = append(out, c.head)
		}
		return out
	},
	"holdsPerSec": func(op *OpStat, d float64) string {
		if !strings.Contains(op.Op, "hold") || d <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(op.Count("201"))/d)
	},
	"auditLine": func(m *Mode) string { return m.auditLine() },
	"verdict":   func(t Target) string { return strings.TrimSpace(t.verdict()) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>berth bench {{.R.Scenario}} {{.R.Started.Format "2006-01-02 15:04"}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:24px;color:#111827;max-width:1280px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}h3{font-size:15px;margin:8px 0}
.muted{color:#6b7280}.pass{background:#dcfce7;padding:8px 12px;border-radius:6px}.fail{background:#fee2e2;padding:8px 12px;border-radius:6px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}th,td{padding:3px 7px;border-bottom:1px solid #e5e7eb;text-align:right}
th:first-child,td:first-child,td.l,th.l{text-align:left}
.modes{display:grid;grid-template-columns:repeat({{len .Modes}},1fr);gap:18px}
.legend span{display:inline-block;margin:2px 10px 2px 0;font-size:12px}
.legend svg{vertical-align:middle;margin-right:4px}
li{margin:3px 0}
</style></head><body>
<h1>berth bench — {{.R.Scenario}}</h1>
<div class="muted">{{.R.Started.Format "2006-01-02 15:04:05 MST"}} · {{.R.Machine.NumCPU}} CPUs (GOMAXPROCS {{.R.Machine.GOMAXPROCS}}) · {{.R.Machine.GoVersion}} · PostgreSQL {{.R.Machine.PostgreSQL}} · Redis {{.R.Machine.Redis}} · berth and the load generator share the machine</div>
<p class="muted">{{.R.Describe}}</p>
{{if .R.Failures}}<div class="fail"><b>FAILED</b><ul>{{range .R.Failures}}<li>{{.}}</li>{{end}}</ul></div>
{{else}}<div class="pass"><b>PASSED</b>: nothing oversold, every invariant holds, no 5xx but 503 overloaded.</div>{{end}}

<h2>Conclusions</h2>
<ul>{{range .Conclusions}}<li>{{.}}</li>{{end}}</ul>

<h2>Open loop</h2>
<p class="muted">Requests are scheduled at the offered rate whatever the answers; latency counts from each request's scheduled time (follow-ups — payments, waiting-room polls and retries — from their own send time).</p>
<table><tr><th class="l">mode</th><th class="l">op</th><th>offered/s</th><th>answers/s</th><th>holds/s</th>{{range cols}}<th>{{.}}</th>{{end}}<th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr>
{{range $m := .R.Modes}}{{if $m.Open}}{{range $op := $m.Open.Ops}}<tr><td>{{$m.Name}}</td><td class="l">{{$op.Op}}{{if not $op.Scheduled}} (follow-up){{end}}</td>
<td>{{if $op.Scheduled}}{{printf "%.0f" $op.OfferedPerSec}}{{else}}-{{end}}</td><td>{{printf "%.0f" $op.AnswersPerSec}}</td><td>{{holdsPerSec $op $m.Open.Window}}</td>
{{range $i, $c := cols}}<td>{{col $op.Outcomes $i}}</td>{{end}}
<td>{{num $op.Latency.P50}}</td><td>{{num $op.Latency.P90}}</td><td>{{num $op.Latency.P99}}</td><td>{{num $op.Latency.Max}}</td></tr>
{{end}}{{end}}{{end}}</table>

<div class="modes">{{range .Modes}}<div>
<h3>{{.M.Name}}</h3>
{{.Throughput}}
{{.Latency}}
<div class="legend">{{range .Legend}}<span><svg width="22" height="8"><line x1="0" y1="4" x2="22" y2="4" stroke="{{.Color}}" stroke-width="2.5" stroke-dasharray="{{.Dash}}"/></svg>{{.Label}}</span>{{end}}</div>
</div>{{end}}</div>

<h2>Latency by outcome</h2>
<table><tr><th class="l">mode</th><th class="l">op</th><th class="l">outcome</th><th>count</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr>
{{range $m := .R.Modes}}{{if $m.Open}}{{range $op := $m.Open.Ops}}{{range $op.Outcomes}}<tr><td>{{$m.Name}}</td><td class="l">{{$op.Op}}</td><td class="l">{{.Outcome}}</td><td>{{.Count}}</td><td>{{num .Latency.P50}}</td><td>{{num .Latency.P90}}</td><td>{{num .Latency.P99}}</td><td>{{num .Latency.Max}}</td></tr>
{{end}}{{end}}{{end}}{{end}}</table>

{{if .Closed}}<h2>Closed loops</h2>
<p class="muted">Each client sends its next request when the previous one is answered. The bare net/http handler answers a fixed 409 problem: the ceiling the rejection path compares with.</p>
{{.Closed}}
<table><tr><th class="l">mode</th><th class="l">measurement</th><th>clients</th><th>seconds</th><th>requests/s</th><th>good/s</th><th class="l">good</th><th>p50 ms</th><th>p99 ms</th><th>max ms</th><th class="l">all outcomes</th></tr>
{{range $m := .R.Modes}}{{range $m.Closed}}<tr><td>{{$m.Name}}</td><td class="l" title="{{.What}}">{{.Name}}</td>{{if .Skipped}}<td colspan="9" class="l">not measured: {{.Skipped}}</td>{{else}}<td>{{.Clients}}</td><td>{{printf "%.1f" .Duration}}</td><td>{{printf "%.0f" .PerSec}}</td><td>{{printf "%.0f" .GoodPerSec}}</td><td class="l">{{.GoodOutcome}}</td><td>{{num .Latency.P50}}</td><td>{{num .Latency.P99}}</td><td>{{num .Latency.Max}}</td><td class="l">{{range .Outcomes}}{{.Outcome}} ×{{.Count}}; {{end}}</td>{{end}}</tr>
{{end}}{{end}}</table>{{end}}

<h2>Audit</h2>
<table>{{range .R.Modes}}<tr><td>{{.Name}}</td><td class="l">{{auditLine .}}</td></tr>
{{range .Audit.Results}}{{if not .OK}}<tr><td></td><td class="l">{{.ID}} {{.Name}}: {{range .Violations}}{{.}}; {{end}}</td></tr>{{end}}{{end}}{{end}}</table>

<h2>Targets of issue 6</h2>
<table>{{range .R.Targets}}<tr><td class="l"><b>{{verdict .}}</b></td><td class="l">{{.Name}}</td><td class="l">{{.Value}}</td></tr>{{end}}</table>

<h2>Features and notes</h2>
<ul>{{range .R.Modes}}{{$n := .Name}}{{range $k, $v := .Features}}<li>{{$n}}: {{$k}}: {{$v}}</li>{{end}}{{range .Notes}}<li>{{$n}}: {{.}}</li>{{end}}{{end}}</ul>

<h2>Settings</h2>
<table>{{range $k, $v := .R.Settings}}<tr><td class="l">{{$k}}</td><td class="l">{{$v}}</td></tr>{{end}}</table>
</body></html>
`))
