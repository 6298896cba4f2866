-- Every outbox row was indexed twice while unpublished: by id
-- (outbox_unpublished_idx, from the first migration) and by stream and id
-- (outbox_stream_unpublished_idx, which the relay's claim reads). The
-- queries that looked for unpublished events by id alone — whether there
-- are any, how many and how old — read the stream index just as well, so
-- the first index only cost every event written one more index entry, and
-- vacuum one more to clear after its publication.

-- +goose Up
DROP INDEX outbox_unpublished_idx;

-- +goose Down
CREATE INDEX outbox_unpublished_idx ON outbox (id) WHERE published_at IS NULL;
