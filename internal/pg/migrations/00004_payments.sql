-- Payments: idempotency keys of the API, charges berth asked the gateway
-- for, the money the gateway reported, and refunds. Every duplicate the
-- outside world can send (a repeated request, a repeated webhook, a
-- repeated refund request) is stopped by a UNIQUE constraint here, never by
-- a read-then-write in Go.

-- +goose Up

-- The first answer to a POST carrying an Idempotency-Key, per caller and
-- key. A row without a response is a request still running: its lease says
-- who runs it and until when, so a retry after a crashed process can take
-- over. Rows live 24 hours.
CREATE TABLE idempotency_key (
    caller_id        bigint      NOT NULL,
    idem_key         text        NOT NULL,
    method           text        NOT NULL,
    path             text        NOT NULL,
    request_hash     bytea       NOT NULL,
    lease            uuid,
    locked_until     timestamptz,
    response_status  integer,
    response_headers jsonb,
    response_body    bytea,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (caller_id, idem_key),
    CONSTRAINT idempotency_key_format_check CHECK (idem_key ~ '^[ -~]{1,255}$'),
    CONSTRAINT idempotency_key_state_check CHECK (
        (response_status IS NULL AND lease IS NOT NULL AND locked_until IS NOT NULL) OR
        (response_status IS NOT NULL AND lease IS NULL AND locked_until IS NULL))
);
CREATE INDEX idempotency_key_expiry_idx ON idempotency_key (expires_at);

-- A charge berth asked the gateway to make, one per booking: a second
-- payment request for the same booking resumes it (same gateway
-- idempotency key) instead of charging twice. The provider's transaction id
-- arrives with the gateway's answer.
CREATE TABLE charge (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    booking_id      bigint      NOT NULL REFERENCES booking (id),
    amount          bigint      NOT NULL,
    currency        text        NOT NULL,
    -- The gateway idempotency key of every attempt to start this charge:
    -- random, so that a gateway that outlives a database never mistakes a
    -- new charge for an old one.
    gateway_key     uuid        NOT NULL DEFAULT gen_random_uuid(),
    provider_txn_id text,
    checkout_url    text,
    created_at      timestamptz NOT NULL,
    CONSTRAINT charge_booking_key UNIQUE (booking_id),
    CONSTRAINT charge_provider_txn_key UNIQUE (provider_txn_id)
);

-- Money the gateway reported received (charge.succeeded), one row per
-- provider transaction: the UNIQUE makes webhook processing idempotent. The
-- booking id is what the gateway said, so it may name no booking. Every row
-- either confirmed its booking or is refunded in full (I4).
CREATE TABLE payment (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider_txn_id text        NOT NULL,
    booking_id      bigint      NOT NULL,
    amount          bigint      NOT NULL,
    currency        text        NOT NULL,
    outcome         text        NOT NULL,
    -- Why the money is refunded: late, amount_mismatch, not_held, …
    reason          text,
    received_at     timestamptz NOT NULL,
    CONSTRAINT payment_provider_txn_key UNIQUE (provider_txn_id),
    CONSTRAINT payment_outcome_check CHECK (
        (outcome = 'confirmed' AND reason IS NULL) OR (outcome = 'refund' AND reason IS NOT NULL)),
    CONSTRAINT payment_amount_check CHECK (amount >= 0)
);
-- A booking is confirmed by one charge at most.
CREATE UNIQUE INDEX payment_confirms_once_idx ON payment (booking_id) WHERE outcome = 'confirmed';

-- A refund of a payment, created from its refund.requested event (whose id
-- keys the gateway call, so a retried event never refunds twice). A payment
-- is refunded at most once: in full when it confirmed nothing, by the
-- booking's rule when its confirmed booking is cancelled.
CREATE TABLE refund (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The CloudEvents id of the refund.requested event (the outbox's
    -- event_id), as the consumer received it.
    event_id          text        NOT NULL,
    payment_id        bigint      NOT NULL REFERENCES payment (id),
    booking_id        bigint      NOT NULL,
    amount            bigint      NOT NULL,
    currency          text        NOT NULL,
    reason            text        NOT NULL,
    status            text        NOT NULL DEFAULT 'REQUESTED',
    gateway_refund_id text,
    created_at        timestamptz NOT NULL,
    completed_at      timestamptz,
    CONSTRAINT refund_event_key UNIQUE (event_id),
    CONSTRAINT refund_payment_key UNIQUE (payment_id),
    CONSTRAINT refund_gateway_key UNIQUE (gateway_refund_id),
    CONSTRAINT refund_amount_check CHECK (amount > 0),
    CONSTRAINT refund_status_check CHECK (
        (status = 'REQUESTED' AND completed_at IS NULL) OR
        (status = 'SUCCEEDED' AND completed_at IS NOT NULL AND gateway_refund_id IS NOT NULL))
);
CREATE INDEX refund_booking_idx ON refund (booking_id);

-- Where the gateway's refund.succeeded webhook meets berth's record of the
-- refund it asked for: either may come first. Both sides upsert this row,
-- and PostgreSQL serialises the two on it, so the second always sees the
-- first and completes the refund.
CREATE TABLE gateway_refund (
    gateway_refund_id text PRIMARY KEY,
    refund_id         bigint REFERENCES refund (id),
    amount            bigint,
    currency          text,
    succeeded_at      timestamptz
);

ALTER TABLE booking ADD COLUMN refund_status text;
ALTER TABLE booking ADD CONSTRAINT booking_refund_status_check
    CHECK (refund_status IN ('REQUESTED', 'SUCCEEDED'));

-- +goose Down
ALTER TABLE booking DROP COLUMN refund_status;
DROP TABLE gateway_refund;
DROP TABLE refund;
DROP TABLE payment;
DROP TABLE charge;
DROP TABLE idempotency_key;
