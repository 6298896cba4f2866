-- +goose Up
-- What a request under an Idempotency-Key made (such as "booking:42"),
-- written in the same transaction as the effect. A key whose request
-- committed its effect is never run again, even when its answer was not
-- stored (the process died, or the database went away, between the commit
-- and the answer): a retry is answered from the effect instead.
ALTER TABLE idempotency_key ADD COLUMN effect text;

-- +goose Down
ALTER TABLE idempotency_key DROP COLUMN effect;
