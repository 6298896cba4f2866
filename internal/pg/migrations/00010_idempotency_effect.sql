-- +goose Up
-- What a request under an Idempotency-Key made (such as "booking:42"),
-- written in the same transaction as the effect. A key whose request
-- committed its effect is never run again, even when its answer was not
-- stored (the process died, or the database went away, between the commit
-- and the answer): a retry is answered from the effect instead.
ALTER TABLE idempotency_key ADD COLUMN effect text;

-- The refunds consumer records a refund and commits; the gateway is asked
-- afterwards, outside any transaction, by a sender that claims the refund
-- until next_attempt_at (the database's clock), so a slow gateway holds no
-- transaction and no event waits for it.
ALTER TABLE refund ADD COLUMN next_attempt_at timestamptz;
CREATE INDEX refund_unsent_idx ON refund (id) WHERE status = 'REQUESTED' AND gateway_refund_id IS NULL;

-- +goose Down
DROP INDEX refund_unsent_idx;
ALTER TABLE refund DROP COLUMN next_attempt_at;
ALTER TABLE idempotency_key DROP COLUMN effect;
