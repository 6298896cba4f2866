package bench

import "fmt"

// Target is one of issue 6's targets, evaluated on this run.
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

// targets evaluates issue 6's targets on the report's modes.
func (r *Report) targets() []Target {
	var on, off *Mode
	for _, m := range r.Modes {
		if m.Protect {
			on = m
		} else {
			off = m
		}
	}
	var out []Target

	out = append(out, Target{Name: "nothing oversold, audit clean, no 5xx but 503 overloaded, in every mode",
		Value: fmt.Sprintf("%d failures", len(r.Failures)), Met: yes(len(r.Failures) == 0)})

	hot := Target{Name: "holds committed/s on one hot flight, protected ≥ 10× bare"}
	if on != nil && off != nil {
		a, b := on.Measurement(HotFlight), off.Measurement(HotFlight)
		if a != nil && b != nil && b.GoodPerSec > 0 {
			ratio := a.GoodPerSec / b.GoodPerSec
			hot.Value = fmt.Sprintf("%.0f/s vs %.0f/s at %d clients = %.1f×", a.GoodPerSec, b.GoodPerSec, a.Clients, ratio)
			hot.Met = yes(ratio >= 10)
		}
	}
	if hot.Value == "" {
		hot.Value = "needs both modes and the hot-flight measurement"
	}
	out = append(out, hot)

	p99 := Target{Name: "protected p99 of all answers < 100 ms with the offered load ≥ 3× what the bare design commits"}
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

	for _, name := range []string{RejectSoldOut, RejectWaitingRoom} {
		t := Target{Name: fmt.Sprintf("%s at ≥ 50%% of the bare net/http handler's throughput (protected)", name), Value: "needs the protected mode"}
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
