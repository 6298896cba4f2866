package clock

import (
	"context"
	"time"
)

// Every calls f every d, the first time d from now, until ctx ends. The
// background services' loops (janitors, senders, pruners) are made of it.
func Every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
