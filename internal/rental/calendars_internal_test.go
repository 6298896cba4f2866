package rental

import (
	"testing"
	"time"
)

// A slow load is repeated less often: twenty times what it took, up to half
// the stale bound.
func TestReloadAfterGrowsWithTheLoad(t *testing.T) {
	after := reloadAfter(time.Second, 30*time.Second)
	for _, tc := range []struct{ took, want time.Duration }{
		{10 * time.Millisecond, time.Second},
		{200 * time.Millisecond, 4 * time.Second},
		{5 * time.Second, 15 * time.Second},
	} {
		if got := after(tc.took); got != tc.want {
			t.Errorf("load took %s: reload after %s, want %s", tc.took, got, tc.want)
		}
	}
}
