-- Surge settings: a flight's waiting room, switched on and tuned by an
-- admin. Only the setting lives here; the queue itself (tickets, the
-- admission frontier) lives in Redis, shared by every berth process.

-- +goose Up
CREATE TABLE waiting_room (
    flight_id        bigint      PRIMARY KEY REFERENCES flight (id),
    enabled          boolean     NOT NULL,
    -- How many callers the room admits per second, across all processes.
    admit_per_second integer     NOT NULL,
    updated_at       timestamptz NOT NULL,
    CONSTRAINT waiting_room_rate_check CHECK (admit_per_second BETWEEN 1 AND 100000)
);
-- The hot path reads the rooms that are on, all at once, every few seconds.
CREATE INDEX waiting_room_enabled_idx ON waiting_room (flight_id) WHERE enabled;

-- +goose Down
DROP TABLE waiting_room;
