package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseProcesses(t *testing.T) {
	for in, want := range map[string][]int{"1": {1}, "2": {2}, "1,2": {1, 2}, "both": {1, 2}, "2,1": {2, 1}} {
		got, err := ParseProcesses(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseProcesses(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "two", "1,1", "1;2"} {
		if got, err := ParseProcesses(in); err == nil {
			t.Errorf("ParseProcesses(%q) = %v, want an error", in, got)
		}
	}
}

// The load is split evenly between the processes, negative indices too.
func TestServerSplitsTheLoadEvenly(t *testing.T) {
	s := &server{urls: []string{"a", "b"}}
	got := map[string]int{}
	for i := range int64(1000) {
		got[s.at(i)]++
	}
	if got["a"] != 500 || got["b"] != 500 {
		t.Errorf("split %v, want 500 each", got)
	}
	if u := s.at(-1); u != "a" && u != "b" {
		t.Errorf("at(-1) = %q", u)
	}
	one := &server{urls: []string{"only"}}
	if one.at(7) != "only" {
		t.Errorf("one process: at(7) = %q", one.at(7))
	}
}

func TestParseVmRSS(t *testing.T) {
	status := "Name:\tberth\nVmPeak:\t 2000 kB\nVmRSS:\t   53412 kB\nRssAnon:\t 40000 kB\n"
	if kb, err := parseVmRSS(strings.NewReader(status)); err != nil || kb != 53412 {
		t.Errorf("parseVmRSS = %d, %v; want 53412", kb, err)
	}
	for _, bad := range []string{"Name:\tberth\n", "VmRSS:\t12 MB\n", "VmRSS:\tlots kB\n"} {
		if kb, err := parseVmRSS(strings.NewReader(bad)); err == nil {
			t.Errorf("parseVmRSS(%q) = %d, want an error", bad, kb)
		}
	}
	// This process has a /proc entry on Linux: the sampler reads it.
	if kb, err := readRSS(1); err == nil && kb < 0 {
		t.Errorf("readRSS(1) = %d", kb)
	}
}

func TestProcessMemoryKeepsStartMaxEnd(t *testing.T) {
	var m ProcessMemory
	for i, kb := range []int64{100, 180, 250, 240, 120} {
		m.add(kb, float64(i))
	}
	if m.StartKB != 100 || m.MaxKB != 250 || m.MaxAt != 2 || m.EndKB != 120 || m.Samples != 5 {
		t.Errorf("memory %+v, want start 100, max 250 at 2 s, end 120, 5 samples", m)
	}
	m.add(300, 4.5) // a second sample in second 4, larger
	m.add(90, 7.2)  // seconds 5 and 6 had no sample
	if want := []int64{100, 180, 250, 240, 300, 0, 0, 90}; !slices.Equal(m.PerSecondKB, want) {
		t.Errorf("per second %v, want %v", m.PerSecondKB, want)
	}
	if got := perSecondMB([]int64{1024, 2560, 0}); got != "1 2 -" {
		t.Errorf("perSecondMB = %q, want %q", got, "1 2 -")
	}
}

func TestChildEnvOverridesInheritedSettings(t *testing.T) {
	env := childEnv([]string{"PATH=/bin", "BERTH_PROTECT=off", "BERTH_HTTP_ADDR=:8080", "X=a=b"},
		map[string]string{"BERTH_PROTECT": "on", "BERTH_HTTP_ADDR": "127.0.0.1:0"}, map[string]string{"BERTH_HTTP_ADDR": "127.0.0.1:4000"})
	slices.Sort(env)
	want := []string{"BERTH_HTTP_ADDR=127.0.0.1:4000", "BERTH_PROTECT=on", "PATH=/bin", "X=a=b"}
	if !slices.Equal(env, want) {
		t.Errorf("childEnv = %q, want %q", env, want)
	}
}

// A route label holds braces (a path pattern), and other metrics share the
// name's prefix: only the named metric's series count.
func TestParseSeriesAndWebhookAnswers(t *testing.T) {
	page := `# HELP berth_http_request_duration_seconds Time to answer HTTP requests, by route and status.
# TYPE berth_http_request_duration_seconds histogram
berth_http_request_duration_seconds_bucket{route="POST /payments/webhook",status="200",le="0.001"} 3
berth_http_request_duration_seconds_count{route="POST /payments/webhook",status="200"} 40
berth_http_request_duration_seconds_count{route="POST /payments/webhook",status="503"} 2
berth_http_request_duration_seconds_count{route="POST /bookings/{id}/payments",status="503"} 7
berth_http_request_duration_seconds_count_total{route="POST /payments/webhook",status="503"} 99
berth_http_request_duration_seconds_count{route="GET /x \"q\"",status="200"} 1e+00
`
	series, err := parseSeries(strings.NewReader(page), "berth_http_request_duration_seconds_count")
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 4 {
		t.Fatalf("%d series, want 4: %+v", len(series), series)
	}
	if series[2].labels["route"] != "POST /bookings/{id}/payments" || series[2].value != 7 {
		t.Errorf("braces in a label: %+v", series[2])
	}
	if series[3].labels["route"] != `GET /x "q"` || series[3].value != 1 {
		t.Errorf("escaped quotes in a label: %+v", series[3])
	}
	if all, shed := webhookAnswers(series); all != 42 || shed != 2 {
		t.Errorf("webhooks %g, 503 %g; want 42 and 2", all, shed)
	}
	if _, err := parseSeries(strings.NewReader(`m{route="open} 1`+"\n"), "m"); err == nil {
		t.Error("an unterminated label value parsed")
	}
}

func TestMoneyLaneCountsThisRunOnly(t *testing.T) {
	open := &OpenResult{Ops: []*OpStat{{Op: "pay", Answered: 30, Outcomes: []OutcomeStat{
		{Outcome: "201", Count: 20}, {Outcome: "503 overloaded", Count: 3}, {Outcome: "503", Count: 1},
		{Outcome: OutcomeSkipped, Count: 6},
	}}}}
	m := moneyLane(open, moneyCount{webhooks: 5, webhook503: 1}, moneyCount{webhooks: 25, webhook503: 4})
	if m.PayStarts != 24 || m.Pay503 != 4 || m.Webhooks != 20 || m.Webhook503 != 3 || m.WebhookError != "" {
		t.Errorf("money lane %+v, want 24 starts (skipped ones left out), 4 × 503, 20 webhooks, 3 × 503", m)
	}
	m = moneyLane(&OpenResult{}, moneyCount{}, moneyCount{err: errTest})
	if m.WebhookError == "" {
		t.Error("a failed scrape is not reported")
	}
}

var errTest = &statusError{method: "GET", path: "/metrics", status: 500}

func TestSecondsP99(t *testing.T) {
	o := &OpenResult{Series: []Second{{Latency: Percentiles{P99: 226}}, {Latency: Percentiles{P99: 40}}, {Latency: Percentiles{P99: 399}}, {Latency: Percentiles{P99: 99.9}}}}
	first, worst, at, over := secondsP99(o)
	if first != 226 || worst != 399 || at != 2 || over != 2 {
		t.Errorf("secondsP99 = %g, %g, %d, %d; want 226, 399, 2, 2", first, worst, at, over)
	}
}

// Each process count is judged on its own pair of modes, and the new
// targets read the per-second p99, the money lane and uncached searches.
func TestTargetsPerProcessCount(t *testing.T) {
	hot := func(perSec float64) []*ClosedResult {
		return []*ClosedResult{{Name: HotFlight, Clients: 32, GoodPerSec: perSec}, {Name: HotFlightMore, Clients: 128, GoodPerSec: perSec}}
	}
	open := func(p99s ...float64) *OpenResult {
		o := &OpenResult{OfferedPerSec: 900, Ops: []*OpStat{{Op: "search-uncached", Outcomes: []OutcomeStat{{Outcome: "200", Count: 5, Latency: Percentiles{P99: 4}}}, Latency: Percentiles{P99: 4}}}}
		for _, p := range p99s {
			o.Series = append(o.Series, Second{Latency: Percentiles{P99: p}})
		}
		return o
	}
	r := &Report{Modes: []*Mode{
		{Name: "protect=off", Processes: 1, Closed: hot(100), Open: open(300)},
		{Name: "protect=on", Processes: 1, Protect: true, Closed: hot(1200), Open: open(20, 30), Money: &MoneyLane{PayStarts: 10, Webhooks: 10}},
		{Name: "protect=off x2", Processes: 2, Closed: hot(100), Open: open(300)},
		{Name: "protect=on x2", Processes: 2, Protect: true, Closed: hot(500), Open: open(150, 30), Money: &MoneyLane{PayStarts: 10, Pay503: 1}},
	}}
	met := map[string]bool{}
	for _, tg := range r.targets() {
		if tg.Met != nil {
			met[tg.Name] = *tg.Met
		}
	}
	for name, want := range map[string]bool{
		"holds committed/s on one hot flight, protected ≥ 10× bare (1 process)":                   true,
		"holds committed/s on one hot flight, protected ≥ 10× bare (2 processes)":                 false,
		"protected p99 of all answers < 100 ms in every second, the first included (1 process)":   true,
		"protected p99 of all answers < 100 ms in every second, the first included (2 processes)": false,
		"protected: no 503 for payment starts and webhooks (1 process)":                           true,
		"protected: no 503 for payment starts and webhooks (2 processes)":                         false,
		"protected car search p99 < 10 ms uncached (1 process)":                                   true,
	} {
		if got, ok := met[name]; !ok || got != want {
			t.Errorf("%s: met %v (present %v), want %v; all: %v", name, got, ok, want, met)
		}
	}
}

// Uncached searches never ask the same question twice, and ask a valid
// one: the popular period, a little longer.
func TestUncachedQueriesAreDistinct(t *testing.T) {
	per := [2]time.Time{time.Date(2026, 12, 10, 9, 0, 0, 0, time.UTC), time.Date(2026, 12, 12, 9, 0, 0, 0, time.UTC)}
	seen := map[string]bool{}
	for i := range int64(5000) {
		q := uncachedQuery(per, "HN", i)
		if seen[q.Encode()] {
			t.Fatalf("query %d repeats an earlier one: %s", i, q.Encode())
		}
		seen[q.Encode()] = true
		to, err := time.Parse(time.RFC3339, q.Get("to"))
		if err != nil || !to.After(per[1]) || to.Sub(per[1]) > 2*time.Hour {
			t.Fatalf("query %d: to %q, want a little after %s", i, q.Get("to"), per[1])
		}
	}
}
