package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"berth.dev/berth/internal/audit"
)

// Report is everything one `berth bench` invocation measured: the settings,
// the machine, every mode side by side, and the verdict. It is written as
// JSON as it is, and rendered as a table and an HTML page.
type Report struct {
	Scenario string            `json:"scenario"`
	Started  time.Time         `json:"started"`
	Machine  Machine           `json:"machine"`
	Settings map[string]string `json:"settings"`
	Modes    []*Mode           `json:"modes"`
	// Targets compares the modes with the targets of issue 6.
	Targets []Target `json:"targets"`
	// Failures lists why the run failed (empty: it passed).
	Failures []string `json:"failures"`
}

// Machine describes where the run happened: the numbers only compare
// within one machine.
type Machine struct {
	NumCPU     int    `json:"numCpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GoVersion  string `json:"goVersion"`
	PostgreSQL string `json:"postgresql"`
	Redis      string `json:"redis"` // the URL's host, or "embedded"
	// LoadStart and LoadEnd are /proc/loadavg's 1, 5 and 15 minute
	// averages when the run started and ended: others may share the CPUs.
	LoadStart string `json:"loadStart"`
	LoadEnd   string `json:"loadEnd"`
}

// Mode is one run of the scenario against berth with the surge layers on
// or off.
type Mode struct {
	Name    string `json:"name"` // "protect=on", "protect=on x2"
	Protect bool   `json:"protect"`
	// Processes is how many berth processes shared the load.
	Processes int    `json:"processes"`
	Database  string `json:"database"`
	// Features says which parts of the scenario this build could exercise:
	// "on", "off", or "unavailable: …" with the answer that showed it.
	Features map[string]string `json:"features"`
	// Open is the open-loop scenario (flash-sale or car-peak).
	Open *OpenResult `json:"open,omitempty"`
	// Closed are the closed-loop measurements: holds on one hot flight,
	// rejections, and the bare net/http handler they compare with.
	Closed []*ClosedResult `json:"closed"`
	Audit  AuditResult     `json:"audit"`
	// Memory is each berth process's resident memory over the mode.
	Memory []ProcessMemory `json:"memory"`
	// Money is the flash sale's payment starts and webhooks.
	Money *MoneyLane `json:"money,omitempty"`
	// Failures lists what failed in this mode.
	Failures []string `json:"failures"`
	// Notes are things a reader should know (features missing, requests
	// never sent).
	Notes []string `json:"notes"`
}

// OpenResult is an open-loop run: requests scheduled at a fixed offered
// rate whatever the answers, latency measured from each request's
// scheduled time (so a slow server cannot hide its queue by slowing the
// client down).
type OpenResult struct {
	Duration float64 `json:"durationSeconds"`
	// Window is the time from the start to the last answer (Duration plus
	// however long the late answers took): rates of answers divide by it.
	Window float64 `json:"answerWindowSeconds"`
	// Offered, Answered and Latency sum up the scheduled operations
	// (follow-ups not included): every scheduled request has exactly one
	// outcome, so Answered == Offered.
	Offered       int         `json:"offered"`
	OfferedPerSec float64     `json:"offeredPerSec"`
	Answered      int         `json:"answered"`
	AnswersPerSec float64     `json:"answersPerSec"`
	Latency       Percentiles `json:"latency"`
	Ops           []*OpStat   `json:"ops"`
	// Committed counts successful holds (201) of every kind, follow-ups
	// included; CommittedPerSec divides by Window.
	Committed       int      `json:"committed"`
	CommittedPerSec float64  `json:"committedPerSec"`
	Series          []Second `json:"series"`
	// FirstSlices is, for each operation, the requests sent (scheduled)
	// in each 100 ms of the first 2 seconds, answered whenever: a sale's
	// cold start next to its steady state.
	FirstSlices map[string][]Slice `json:"firstSlices,omitempty"`
	// Errors holds one message per transport outcome, for diagnosis.
	Errors map[string]string `json:"errors,omitempty"`
}

// Slice is the requests of one operation sent in one 100 ms slice.
type Slice struct {
	Count   int         `json:"count"`
	Latency Percentiles `json:"latency"`
}

// OpStat is one operation's requests: offered (scheduled, for the
// operations the scenario schedules; follow-ups have none) and answered, by
// outcome.
type OpStat struct {
	Op            string         `json:"op"`
	Scheduled     bool           `json:"scheduled"`
	Offered       int            `json:"offered"`
	OfferedPerSec float64        `json:"offeredPerSec"`
	Answered      int            `json:"answered"` // every outcome, unsent and transport errors included
	AnswersPerSec float64        `json:"answersPerSec"`
	Latency       Percentiles    `json:"latency"`
	Outcomes      []OutcomeStat  `json:"outcomes"`
	counts        map[string]int // outcome → count, for lookups
}

// OutcomeStat is how many requests ended one way, and how fast.
type OutcomeStat struct {
	Outcome string      `json:"outcome"`
	Count   int         `json:"count"`
	Latency Percentiles `json:"latency"`
}

// Second is one second of an open-loop run: requests scheduled in it,
// answers that arrived in it (Answered and Latency leave out requests never
// sent or cut off at the end), and every request that ended in it by
// "op outcome".
type Second struct {
	T        int                    `json:"t"`
	Offered  map[string]int         `json:"offered"`
	Answered int                    `json:"answered"`
	Latency  Percentiles            `json:"latency"`
	Outcomes map[string]SecondStats `json:"outcomes"`
}

// SecondStats is one "op outcome" within a second.
type SecondStats struct {
	Count   int         `json:"count"`
	Latency Percentiles `json:"latency"`
}

// ClosedResult is a closed-loop measurement: Clients callers each sending
// their next request as soon as the previous one is answered.
type ClosedResult struct {
	Name     string  `json:"name"` // "hot-flight", "reject-sold-out", "reject-waiting-room", "bare-net-http"
	What     string  `json:"what"`
	Clients  int     `json:"clients"`
	Duration float64 `json:"durationSeconds"`
	Requests int     `json:"requests"`
	PerSec   float64 `json:"perSec"`
	// Good counts the answers the measurement is about (201 for the hot
	// flight, the expected rejection otherwise); GoodPerSec divides by
	// Duration.
	Good        int           `json:"good"`
	GoodOutcome string        `json:"goodOutcome"`
	GoodPerSec  float64       `json:"goodPerSec"`
	Latency     Percentiles   `json:"latency"`
	Outcomes    []OutcomeStat `json:"outcomes"`
	PerSecond   []int         `json:"perSecond"` // good answers in each second
	Skipped     string        `json:"skipped,omitempty"`
	// DB is what the database did per hold over a hot-flight loop.
	DB     *DBWork        `json:"db,omitempty"`
	counts map[string]int // outcome → count
}

// DBWork is the database work per committed hold over a closed loop:
// transactions from pg_stat_database (every session of the mode's
// database: the holds, the event relay and consumers, the background
// work), and berth's round trips to PostgreSQL. The counters are read
// SettleSeconds after each loop, as PostgreSQL reports sessions'
// statistics late; what ran meanwhile counts too.
type DBWork struct {
	CommitsPerHold    float64 `json:"commitsPerHold"`
	RollbacksPerHold  float64 `json:"rollbacksPerHold"`
	RoundTripsPerHold float64 `json:"roundTripsPerHold"`
	SettleSeconds     float64 `json:"settleSeconds"`
}

// AuditResult is the invariant audit run on the mode's database at the end.
type AuditResult struct {
	Ran     bool           `json:"ran"`
	OK      bool           `json:"ok"`
	Error   string         `json:"error,omitempty"`
	Results []audit.Result `json:"results"`
}

// opResult turns one op's tally into its report.
func opResult(name string, t *opTally, scheduled bool, offeredOver, answeredOver float64) *OpStat {
	o := &OpStat{Op: name, Scheduled: scheduled, Offered: t.offered, counts: map[string]int{}}
	var names []string
	for outcome := range t.outcomes {
		names = append(names, outcome)
	}
	sortOutcomes(names)
	for _, outcome := range names {
		h := t.outcomes[outcome]
		o.Outcomes = append(o.Outcomes, OutcomeStat{Outcome: outcome, Count: int(h.n), Latency: h.percentiles()})
		o.counts[outcome] = int(h.n)
		o.Answered += int(h.n)
	}
	o.Latency = t.all.percentiles()
	if offeredOver > 0 {
		o.OfferedPerSec = float64(o.Offered) / offeredOver
	}
	if answeredOver > 0 {
		o.AnswersPerSec = float64(o.Answered-o.counts[OutcomeUnsent]-o.counts[OutcomeCutOff]-o.counts[OutcomeSkipped]) / answeredOver
	}
	return o
}

// openResult builds the report of an open-loop run from its recorder.
func openResult(r *recorder, scheduled []string, dur time.Duration) *OpenResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &OpenResult{Duration: dur.Seconds(), Window: max(dur, r.last.Sub(r.start)).Seconds(), Errors: r.samples}
	var names []string
	for name := range r.ops {
		names = append(names, name)
	}
	isScheduled := func(op string) bool {
		for _, s := range scheduled {
			if s == op {
				return true
			}
		}
		return false
	}
	sort.Slice(names, func(i, j int) bool {
		si, sj := isScheduled(names[i]), isScheduled(names[j])
		if si != sj {
			return si
		}
		return names[i] < names[j]
	})
	var all hist
	for _, name := range names {
		o := opResult(name, r.ops[name], isScheduled(name), res.Duration, res.Window)
		res.Ops = append(res.Ops, o)
		if o.Scheduled {
			all.merge(&r.ops[name].all)
			res.Offered += o.Offered
			res.OfferedPerSec += o.OfferedPerSec
			res.Answered += o.Answered
			res.AnswersPerSec += o.AnswersPerSec
		}
		if strings.Contains(name, "hold") {
			res.Committed += o.counts["201"]
		}
	}
	res.Latency = all.percentiles()
	if res.Window > 0 {
		res.CommittedPerSec = float64(res.Committed) / res.Window
	}
	for i, s := range r.seconds {
		sec := Second{T: i, Offered: s.offered, Answered: int(s.all.n), Latency: s.all.percentiles(),
			Outcomes: map[string]SecondStats{}}
		for key, h := range s.outcomes {
			sec.Outcomes[key] = SecondStats{Count: int(h.n), Latency: h.percentiles()}
		}
		res.Series = append(res.Series, sec)
	}
	res.FirstSlices = map[string][]Slice{}
	for op, sl := range r.slices {
		for i := range sl {
			res.FirstSlices[op] = append(res.FirstSlices[op], Slice{Count: int(sl[i].n), Latency: sl[i].percentiles()})
		}
	}
	return res
}

// Op returns the named operation's statistics, or nil.
func (o *OpenResult) Op(name string) *OpStat {
	if o == nil {
		return nil
	}
	for _, op := range o.Ops {
		if op.Op == name {
			return op
		}
	}
	return nil
}

// Count returns how many requests of the operation ended with outcome.
func (o *OpStat) Count(outcome string) int {
	for _, s := range o.Outcomes {
		if s.Outcome == outcome {
			return s.Count
		}
	}
	return 0
}

// Count returns how many requests of the measurement ended with outcome.
func (c *ClosedResult) Count(outcome string) int {
	for _, s := range c.Outcomes {
		if s.Outcome == outcome {
			return s.Count
		}
	}
	return 0
}

// Measurement returns the mode's closed-loop measurement of that name, or
// nil.
func (m *Mode) Measurement(name string) *ClosedResult {
	for _, c := range m.Closed {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// verdict lists what makes a mode fail: invariant violations, an audit
// that could not run, and server errors other than 503 overloaded.
func (m *Mode) verdict() []string {
	var out []string
	if !m.Audit.Ran {
		out = append(out, fmt.Sprintf("%s: the invariant audit did not run: %s", m.Name, m.Audit.Error))
	} else if !m.Audit.OK {
		for _, r := range m.Audit.Results {
			if !r.OK {
				out = append(out, fmt.Sprintf("%s: invariant %s VIOLATED (%d): %s; e.g. %s",
					m.Name, r.ID, r.Count, r.Name, strings.Join(r.Violations[:min(len(r.Violations), 3)], "; ")))
			}
		}
	}
	check := func(where string, outcomes []OutcomeStat) {
		for _, s := range outcomes {
			if isServerError(s.Outcome) {
				out = append(out, fmt.Sprintf("%s: %s: %d answers %q (only 503 overloaded is allowed)", m.Name, where, s.Count, s.Outcome))
			}
		}
	}
	if m.Open != nil {
		for _, op := range m.Open.Ops {
			check(op.Op, op.Outcomes)
		}
	}
	for _, c := range m.Closed {
		check(c.Name, c.Outcomes)
	}
	return out
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write JSON report: %w", err)
	}
	return nil
}
