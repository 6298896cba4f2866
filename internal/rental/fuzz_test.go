package rental

import (
	"testing"
	"time"
)

// FuzzValidPeriod feeds the rental period check arbitrary instants and
// offsets: it never panics, and a period it accepts starts now or later,
// within MaxAdvance, ends after it starts, and lasts at most MaxPeriod.
func FuzzValidPeriod(f *testing.F) {
	f.Add(int64(86400), int64(3*86400), int32(7*3600), int32(7*3600))
	f.Add(int64(-1), int64(3600), int32(0), int32(0))
	f.Add(int64(3600), int64(3600), int32(0), int32(0))
	f.Add(int64(0), int64(91*86400), int32(14*3600), int32(-12*3600))
	f.Add(int64(1<<62), int64(-1<<62), int32(1<<30), int32(-1<<30))
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, fromSec, toSec int64, fromOff, toOff int32) {
		from := now.Add(time.Duration(fromSec) * time.Second).In(time.FixedZone("", int(fromOff)))
		to := now.Add(time.Duration(toSec) * time.Second).In(time.FixedZone("", int(toOff)))
		if validPeriod(from, to, now) != nil {
			return
		}
		if from.Before(now) || from.After(now.Add(MaxAdvance)) || !to.After(from) || to.Sub(from) > MaxPeriod {
			t.Fatalf("accepted %s – %s at %s", from, to, now)
		}
	})
}
