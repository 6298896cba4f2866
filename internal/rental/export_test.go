package rental

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/berth/internal/booking"
)

// SearchLoadedAt answers q at the server's time now from q.City's calendar
// as a load at loadedAt read it: what Search does, with the load's time and
// the search's apart.
func SearchLoadedAt(ctx context.Context, pool *pgxpool.Pool, q SearchQuery, loadedAt, now time.Time) (*SearchResult, error) {
	cc, err := loadCity(ctx, pool, q.City, loadedAt)
	if err != nil {
		return nil, err
	}
	return cc.free(q, now), nil
}

// HoldTogether holds reqs, all of car carID, as one batch and returns each
// request's answer.
func (s *Service) HoldTogether(ctx context.Context, carID int64, reqs ...HoldRequest) ([]*booking.Booking, []error, error) {
	calls := batchCalls(ctx, reqs...)
	if err := s.holdMany(ctx, carID, calls); err != nil {
		return nil, nil, err
	}
	bs, errs := make([]*booking.Booking, len(reqs)), make([]error, len(reqs))
	for i, cl := range calls {
		bs[i], errs[i] = cl.Out, cl.Err
	}
	return bs, errs, nil
}
