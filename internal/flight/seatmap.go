package flight

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/fault"
)

// SeatMap is the status of every seat of a flight at one moment.
type SeatMap struct {
	FlightID int64
	AsOf     time.Time
	// Departed says the flight had departed at AsOf: nothing on it is for
	// sale any more, whatever its seats' statuses say (a free seat stays
	// AVAILABLE, the one word the statuses have for it).
	Departed bool
	Seats    []Seat
}

// Seat is one seat's status: AVAILABLE, HELD or SOLD.
type Seat struct {
	SeatNo    string `json:"seatNo"`
	FareClass string `json:"fareClass"`
	Status    string `json:"status"`
}

// SeatMap returns flight id's seat map, at most the seat map TTL old: one
// query per refill however many callers ask. A hold past its expiry shows
// AVAILABLE; a departed flight's map says so. Returns fault.NotFound.
func (s *Service) SeatMap(ctx context.Context, id int64) (*SeatMap, error) {
	return s.seatMaps.Get(ctx, strconv.FormatInt(id, 10), func(ctx context.Context) (*SeatMap, error) {
		now := s.clock.Now()
		var departure time.Time
		err := s.reads().QueryRow(ctx, `SELECT departure_at FROM flight WHERE id = $1`, id).Scan(&departure)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fault.New(fault.NotFound, "no flight %d", id)
		}
		if err != nil {
			return nil, fmt.Errorf("seat map of flight %d: %w", id, err)
		}
		rows, err := s.reads().Query(ctx, `SELECT seat_no, fare_class,
				CASE WHEN status = 'HELD' AND held_until <= $2 THEN 'AVAILABLE' ELSE status END
			FROM seat WHERE flight_id = $1 ORDER BY length(seat_no), seat_no`, id, now)
		if err != nil {
			return nil, fmt.Errorf("seat map of flight %d: %w", id, err)
		}
		seats, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Seat])
		if err != nil {
			return nil, fmt.Errorf("seat map of flight %d: %w", id, err)
		}
		return &SeatMap{FlightID: id, AsOf: now, Departed: !departure.After(now), Seats: seats}, nil
	})
}
