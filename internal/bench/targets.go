package bench

import (
	"fmt"
	"slices"
)

// Target is one of issues 6's and 14's targets, evaluated on this run.
type Target struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Met is nil when the run cannot tell (a mode or measurement missing).
	Met *bool `json:"met"`
}

func (t Target) verdict() string {
	switch {
	case t.Met == nil:
		return " n/a "
	case *t.Met:
		return " met "
	}
	return "NOT MET"
}

func yes(b bool) *bool { return &b }

// targets evaluates issues 6's and 14's targets on the report's modes,
// the bare and protected modes of each process count compared with each
// other.
func (r *Report) targets() []Target {
	var out []Target
	out = append(out, Target{Name: "nothing oversold, audit clean, no 5xx but 503 overloaded, in every mode",
		Value: fmt.Sprintf("%d failures", len(r.Failures)), Met: yes(len(r.Failures) == 0)})
	counts := r.processCounts()
	for _, n := range counts {
		suffix := ""
		if len(counts) > 1 || n > 1 {
			suffix = fmt.Sprintf(" (%d process%s)", n, map[bool]string{true: "es"}[n > 1])
		}
		var on, off *Mode
		for _, m := range r.Modes {
			switch {
			case m.processes() != n:
			case m.Protect:
				on = m
			default:
				off = m
			}
		}
		out = append(out, pairTargets(on, off, suffix)...)
	}
	return out
}

// processCounts lists the modes' process counts in the order they ran.
func (r *Report) processCounts() []int {
	var out []int
	for _, m := range r.Modes {
		if !slices.Contains(out, m.processes()) {
			out = append(out, m.processes())
		}
	}
	return out
}

// processes is how many berth processes the mode ran (reports written
// before the field existed ran one).
func (m *Mode) processes() int { return max(m.Processes, 1) }

// pairTargets evaluates the targets on the protected mode on and the bare
// mode off of one process count (either may be nil).
func pairTargets(on, off *Mode, suffix string) []Target {
	var out []Target
	for _, name := range []string{HotFlight, HotFlightMore} {
		hot := Target{Name: "holds committed/s on one hot flight, protected ≥ 10× bare" + suffix}
		if name == HotFlightMore {
			hot.Name = "holds committed/s on one hot flight with --hot-clients-more clients, protected ≥ 10× bare" + suffix
		}
		if on != nil && off != nil {
			a, b := on.Measurement(name), off.Measurement(name)
			if a == nil || b == nil {
				continue
			}
			if b.GoodPerSec > 0 {
				ratio := a.GoodPerSec / b.GoodPerSec
				hot.Value = fmt.Sprintf("%.0f/s vs %.0f/s at %d clients = %.1f×", a.GoodPerSec, b.GoodPerSec, a.Clients, ratio)
				hot.Met = yes(ratio >= 10)
			}
		}
		if hot.Value == "" {
			hot.Value = "needs both modes and the hot-flight measurement"
		}
		out = append(out, hot)
	}

	p99 := Target{Name: "protected p99 of all answers < 100 ms with the offered load ≥ 3× what the bare design commits" + suffix}
	if on != nil && on.Open != nil {
		lat := on.Open.Latency
		p99.Value = fmt.Sprintf("protected p99 %s", fmtMS(lat.P99))
		if off != nil && off.Open != nil {
			p99.Value += fmt.Sprintf(", bare p99 %s", fmtMS(off.Open.Latency.P99))
			if b := off.Measurement(HotFlight); b != nil && b.GoodPerSec > 0 {
				load := on.Open.OfferedPerSec / b.GoodPerSec
				p99.Value += fmt.Sprintf("; offered %.0f/s = %.1f× the bare design's %.0f holds/s on one flight", on.Open.OfferedPerSec, load, b.GoodPerSec)
				p99.Met = yes(lat.P99 < 100 && load >= 3)
			}
		}
	}
	if p99.Value == "" {
		p99.Value = "needs the protected mode"
	}
	out = append(out, p99)

	if on != nil && on.Open != nil && len(on.Open.Series) > 0 {
		first, worst, at, over := secondsP99(on.Open)
		out = append(out, Target{Name: "protected p99 of all answers < 100 ms in every second, the first included" + suffix,
			Value: fmt.Sprintf("first second %s, worst second %s (second %d), %d of %d seconds at 100 ms or more",
				fmtMS(first), fmtMS(worst), at+1, over, len(on.Open.Series)),
			Met: yes(over == 0)})
	}
	if on != nil && on.Money != nil {
		m := on.Money
		t := Target{Name: "protected: no 503 for payment starts and webhooks" + suffix,
			Value: fmt.Sprintf("%d of %d payment starts and %d of %d webhooks answered 503", m.Pay503, m.PayStarts, m.Webhook503, m.Webhooks)}
		if m.WebhookError != "" {
			t.Value = fmt.Sprintf("%d of %d payment starts answered 503; webhooks not counted: %s", m.Pay503, m.PayStarts, m.WebhookError)
		} else {
			t.Met = yes(m.Pay503 == 0 && m.Webhook503 == 0)
		}
		out = append(out, t)
	}
	if on != nil {
		if op := on.Open.Op("search-uncached"); op != nil && op.Count("200") > 0 {
			out = append(out, Target{Name: "protected car search p99 < 10 ms uncached" + suffix,
				Value: fmt.Sprintf("p99 %s over %d uncached searches answered 200 (all answers: p99 %s)",
					fmtMS(outcomeP99(op, "200")), op.Count("200"), fmtMS(op.Latency.P99)),
				Met: yes(op.Latency.P99 < 10)})
		}
	}

	for _, name := range []string{RejectSoldOut, RejectWaitingRoom} {
		t := Target{Name: fmt.Sprintf("%s at ≥ 50%% of the bare net/http handler's throughput (protected)%s", name, suffix), Value: "needs the protected mode"}
		if on != nil {
			rej, bare := on.Measurement(name), on.Measurement(BareNetHTTP)
			switch {
			case rej == nil || bare == nil:
			case rej.Skipped != "":
				t.Value = "not measured: " + rej.Skipped
			case bare.GoodPerSec > 0:
				share := rej.GoodPerSec / bare.GoodPerSec
				t.Value = fmt.Sprintf("%.0f/s vs %.0f/s = %.0f %%", rej.GoodPerSec, bare.GoodPerSec, 100*share)
				t.Met = yes(share >= 0.5)
			}
		}
		out = append(out, t)
	}
	return out
}

// secondsP99 returns the p99 of all answers in the first second of an
// open-loop run, the worst second's and which second that was, and how
// many seconds were at 100 ms or more. Seconds without answers count as
// 0 ms.
func secondsP99(o *OpenResult) (first, worst float64, at, over int) {
	for i, s := range o.Series {
		p := s.Latency.P99
		if i == 0 {
			first = p
		}
		if p > worst {
			worst, at = p, i
		}
		if p >= 100 {
			over++
		}
	}
	return first, worst, at, over
}

// outcomeP99 is the p99 of one outcome of op (0 when there is none).
func outcomeP99(op *OpStat, outcome string) float64 {
	for _, s := range op.Outcomes {
		if s.Outcome == outcome {
			return s.Latency.P99
		}
	}
	return 0
}
