package apptest

import (
	"testing"
	"time"
)

// Eventually calls cond every 20 ms until it reports true, and fails t,
// saying what was not reached, when within passes first. It is for what
// happens in the background in real time (an event relay, a webhook, a
// replica); what the fake clock decides needs no waiting. Every package's
// tests wait with it.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
