-- The outbox's ordering partition is called a stream: a booking's events
-- all go to one stream (booking_id % 64), and a relay publishes only from
-- the streams it has locked (docs/events.md). It was called a lane, the
-- word the surge layers use for a concurrency class; only the names
-- change, not the data or the plans. A relay of an earlier version fails
-- its passes (and retries with backoff) from this migration until it is
-- replaced: migrate with the new version's relays, or stop the old ones.

-- +goose Up
ALTER TABLE outbox RENAME COLUMN lane TO stream;
ALTER INDEX outbox_lane_unpublished_idx RENAME TO outbox_stream_unpublished_idx;
ALTER TABLE outbox_lane RENAME TO outbox_stream;
ALTER TABLE outbox_stream RENAME COLUMN lane TO stream;
ALTER TABLE outbox_stream RENAME CONSTRAINT outbox_lane_check TO outbox_stream_check;
ALTER INDEX outbox_lane_pkey RENAME TO outbox_stream_pkey;

-- +goose Down
ALTER INDEX outbox_stream_pkey RENAME TO outbox_lane_pkey;
ALTER TABLE outbox_stream RENAME CONSTRAINT outbox_stream_check TO outbox_lane_check;
ALTER TABLE outbox_stream RENAME COLUMN stream TO lane;
ALTER TABLE outbox_stream RENAME TO outbox_lane;
ALTER INDEX outbox_stream_unpublished_idx RENAME TO outbox_lane_unpublished_idx;
ALTER TABLE outbox RENAME COLUMN stream TO lane;
