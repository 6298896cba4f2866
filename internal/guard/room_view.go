package guard

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// RoomView is a flight's waiting room as an operator watches it.
type RoomView struct {
	Enabled        bool `json:"enabled"`
	AdmitPerSecond int  `json:"admitPerSecond"`
	// Queued is how many tickets the frontier has not reached yet: the
	// people waiting (some may have given up; their tickets expire).
	Queued int64 `json:"queued"`
}

// roomQueue moves the frontier and returns the last ticket's number and
// the frontier. KEYS: the room's state. ARGV: now (ms), admit per second.
var roomQueue = redis.NewScript(advanceFront + saveFront + `
return {seq, math.floor(front)}
`)

// Views returns the waiting rooms of flights, off for a flight whose room
// was never set. Queued is counted only for rooms that are on, and is 0
// while Redis is unreachable.
func (rm *Room) Views(ctx context.Context, flights []int64) (map[int64]RoomView, error) {
	out := make(map[int64]RoomView, len(flights))
	rows, err := rm.pool.Query(ctx, `SELECT flight_id, enabled, admit_per_second FROM waiting_room WHERE flight_id = ANY($1)`, flights)
	if err != nil {
		return nil, fmt.Errorf("waiting rooms: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var v RoomView
		if err := rows.Scan(&id, &v.Enabled, &v.AdmitPerSecond); err != nil {
			return nil, fmt.Errorf("waiting rooms: %w", err)
		}
		out[id] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("waiting rooms: %w", err)
	}
	for id, v := range out {
		if !v.Enabled || !rm.on || !rm.r.Usable() {
			continue
		}
		res, err := roomQueue.Run(ctx, rm.r.Cmd, []string{rm.stateKey(id)}, rm.clock.Now().UnixMilli(), v.AdmitPerSecond).Int64Slice()
		if err != nil {
			rm.r.Fail("waiting_room", err)
			continue
		}
		v.Queued = max(0, res[0]-res[1])
		out[id] = v
	}
	return out, nil
}
