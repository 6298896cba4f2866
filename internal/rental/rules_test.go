package rental

import (
	"errors"
	"testing"
	"time"

	"berth.dev/berth/internal/fault"
)

func TestRentalPriceCountsStartedDays(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 12, 10, 8, 0, 0, 0, time.FixedZone("", 7*3600))
	for _, tc := range []struct {
		length time.Duration
		days   int64
	}{
		{time.Microsecond, 1},
		{time.Hour, 1},
		{24 * time.Hour, 1},
		{24*time.Hour + time.Microsecond, 2},
		{24*time.Hour + time.Minute, 2},
		{72 * time.Hour, 3},
		{84 * time.Hour, 4},
		{MaxPeriod, 90},
	} {
		if got, want := RentalPrice(800_000, from, from.Add(tc.length)), 800_000*tc.days; got != want {
			t.Errorf("%s: price %d, want %d (%d days)", tc.length, got, want, tc.days)
		}
	}
}

func TestFormatTurnaround(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", 2 * time.Hour: "2h", 90 * time.Minute: "1h30m", 45 * time.Minute: "45m", 48 * time.Hour: "48h",
	} {
		if got := FormatTurnaround(d); got != want {
			t.Errorf("FormatTurnaround(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestHoldRequestValidate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	ict := time.FixedZone("", 7*3600)
	from := time.Date(2026, 12, 10, 8, 0, 0, 0, ict)
	for _, tc := range []struct {
		name  string
		r     HoldRequest
		field string // "" when valid
	}{
		{"valid", HoldRequest{CarID: 1, From: from, To: from.Add(3 * 24 * time.Hour)}, ""},
		{"no car", HoldRequest{From: from, To: from.Add(time.Hour)}, "carId"},
		{"to before from", HoldRequest{CarID: 1, From: from, To: from.Add(-time.Hour)}, "to"},
		{"empty period", HoldRequest{CarID: 1, From: from, To: from}, "to"},
		{"in the past", HoldRequest{CarID: 1, From: now.Add(-time.Minute), To: from}, "from"},
		{"starting now", HoldRequest{CarID: 1, From: now, To: now.Add(time.Hour)}, ""},
		{"90 days", HoldRequest{CarID: 1, From: from, To: from.Add(MaxPeriod)}, ""},
		{"longer than 90 days", HoldRequest{CarID: 1, From: from, To: from.Add(MaxPeriod + time.Minute)}, "to"},
		{"too far ahead", HoldRequest{CarID: 1, From: now.Add(MaxAdvance + time.Hour), To: now.Add(MaxAdvance + 2*time.Hour)}, "from"},
		{"offset beyond 18h", HoldRequest{CarID: 1, From: from.In(time.FixedZone("", 19*3600)), To: from.Add(time.Hour)}, "from"},
	} {
		err := tc.r.Validate(now)
		var fe *fault.Error
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v, want valid", tc.name, err)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Code != fault.ValidationFailed):
			t.Errorf("%s: %v, want validation_failed", tc.name, err)
		case tc.field != "" && fe.Field != tc.field:
			t.Errorf("%s: field %q, want %q", tc.name, fe.Field, tc.field)
		}
	}
}

func TestNewCarValidate(t *testing.T) {
	t.Parallel()
	good := func() NewCar {
		return NewCar{HostID: 7, Plate: "30a-123.45", Model: "Toyota Vios", City: "HN", DailyPrice: 800_000,
			Deposit: 5_000_000, Currency: "VND", Turnaround: 2 * time.Hour}
	}
	nc := good()
	if err := nc.validate(); err != nil || nc.Plate != "30A-123.45" {
		t.Fatalf("good car: %v, plate %q", err, nc.Plate)
	}
	for field, spoil := range map[string]func(*NewCar){
		"plate":      func(c *NewCar) { c.Plate = "x" },
		"model":      func(c *NewCar) { c.Model = " " },
		"city":       func(c *NewCar) { c.City = "hanoi" },
		"dailyPrice": func(c *NewCar) { c.DailyPrice = 0 },
		"deposit":    func(c *NewCar) { c.Deposit = -1 },
		"currency":   func(c *NewCar) { c.Currency = "vnd" },
		"turnaround": func(c *NewCar) { c.Turnaround = 49 * time.Hour },
	} {
		nc := good()
		spoil(&nc)
		var fe *fault.Error
		if err := nc.validate(); !errors.As(err, &fe) {
			t.Errorf("%s: %v, want refused", field, err)
		} else if fe.Field != field {
			t.Errorf("%s: refused for %q", field, fe.Field)
		}
	}
}
