package booking

import (
	"context"
	"time"
)

// UntilNext is the sweeper's wait before its next pass, for tests.
func (s *Sweeper) UntilNext(ctx context.Context) time.Duration { return s.untilNext(ctx) }
