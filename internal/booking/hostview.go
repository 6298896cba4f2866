package booking

import (
	"context"
	"fmt"
	"time"

	"berth.dev/berth/internal/auth"
)

// HostFilter narrows a host's bookings; zero fields do not filter.
type HostFilter struct {
	Status Status
	CarID  int64
}

// ListForHost returns the bookings of the cars caller may manage as they
// read at now (AsOf), newest first: a host's own cars, or every booking for
// an admin; at most limit, with ids below before when before > 0. The
// status filter sees the status as read at now: a hold that ran out is
// EXPIRED, not HELD.
func ListForHost(ctx context.Context, db Querier, caller auth.Caller, f HostFilter, now time.Time, limit int, before int64) ([]*Booking, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := db.Query(ctx, `SELECT `+Columns+` FROM booking
		WHERE ($1 OR host_id = $2) AND id < $3 AND ($4 = ''
			OR (CASE WHEN status = 'HELD' AND hold_expires_at <= $7 THEN 'EXPIRED' ELSE status END) = $4) AND ($5::bigint = 0 OR car_id = $5)
		ORDER BY id DESC LIMIT $6`, caller.Admin(), caller.ID, before, string(f.Status), f.CarID, limit, now)
	if err != nil {
		return nil, fmt.Errorf("list bookings of host %d: %w", caller.ID, err)
	}
	out, err := collectAsOf(rows, now)
	if err != nil {
		return nil, fmt.Errorf("list bookings of host %d: %w", caller.ID, err)
	}
	return out, nil
}

// ParseStatus returns the status named s. Returns false for a name that
// is not one of the statuses.
func ParseStatus(s string) (Status, bool) {
	switch st := Status(s); st {
	case Held, Confirmed, Expired, Cancelled, OnTrip, Completed:
		return st, true
	}
	return "", false
}
