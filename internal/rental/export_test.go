package rental

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
