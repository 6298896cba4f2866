package policy

import (
	"encoding/json"
	"testing"
	"time"
)

func TestRefund(t *testing.T) {
	t.Parallel()
	pickup := time.Date(2026, 1, 25, 8, 0, 0, 0, time.FixedZone("ICT", 7*3600))
	const deposit = 2_000_000
	tests := []struct {
		name   string
		rule   Rule
		before time.Duration
		want   int64
	}{
		{"car 73h before", CarRental, 73 * time.Hour, deposit},
		{"car exactly 72h before", CarRental, 72 * time.Hour, deposit},
		{"car 71h59m before", CarRental, 71*time.Hour + 59*time.Minute, deposit / 2},
		{"car 30h before", CarRental, 30 * time.Hour, deposit / 2},
		{"car exactly 24h before", CarRental, 24 * time.Hour, deposit / 2},
		{"car 23h59m before", CarRental, 23*time.Hour + 59*time.Minute, 0},
		{"car 2h before", CarRental, 2 * time.Hour, 0},
		{"car after pickup", CarRental, -time.Hour, 0},
		{"flight default 25h before", FlightDefault, 25 * time.Hour, deposit},
		{"flight default exactly 24h before", FlightDefault, 24 * time.Hour, deposit},
		{"flight default 23h before", FlightDefault, 23 * time.Hour, 0},
		{"flight 80% up to 48h", Flight(80, 48*time.Hour), 50 * time.Hour, deposit * 8 / 10},
		{"flight 80% too late", Flight(80, 48*time.Hour), 47 * time.Hour, 0},
		{"non-refundable fare", Flight(0, 0), 1000 * time.Hour, 0},
		{"empty rule", Rule{}, 1000 * time.Hour, 0},
		// Tiers in any order: the longest notice met wins.
		{"unordered tiers", Rule{{24 * time.Hour, 50}, {72 * time.Hour, 100}}, 80 * time.Hour, deposit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.rule.Refund(deposit, pickup, pickup.Add(-tt.before))
			if got != tt.want {
				t.Errorf("Refund(%d, %s before) = %d, want %d", deposit, tt.before, got, tt.want)
			}
		})
	}
}

func TestRefundRoundsDownInMinorUnits(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	if got := CarRental.Refund(101, start, start.Add(-30*time.Hour)); got != 50 {
		t.Errorf("half of 101 = %d, want 50", got)
	}
}

func TestRuleJSONRoundTrip(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(CarRental)
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"noticeSeconds":259200,"percent":100},{"noticeSeconds":86400,"percent":50}]`; string(b) != want {
		t.Errorf("json = %s, want %s", b, want)
	}
	var back Rule
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || back[0] != CarRental[0] || back[1] != CarRental[1] {
		t.Errorf("round trip = %v, want %v", back, CarRental)
	}
	if err := json.Unmarshal([]byte(`[{"noticeSeconds":1,"percent":101}]`), &back); err == nil {
		t.Error("a 101 % tier was accepted")
	}
}

func TestWindowNamesTheTier(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		rule              Rule
		before            time.Duration
		atLeast, lessThan time.Duration
	}{
		{CarRental, 100 * time.Hour, 72 * time.Hour, -1},
		{CarRental, 72 * time.Hour, 72 * time.Hour, -1},
		{CarRental, 48 * time.Hour, 24 * time.Hour, 72 * time.Hour},
		{CarRental, 10 * time.Hour, -1, 24 * time.Hour},
		{Flight(0, 24*time.Hour), 48 * time.Hour, -1, -1},
	} {
		a, l := c.rule.Window(start, start.Add(-c.before))
		if a != c.atLeast || l != c.lessThan {
			t.Errorf("%v, %s before: window [%s, %s), want [%s, %s)", c.rule, c.before, a, l, c.atLeast, c.lessThan)
		}
	}
}
