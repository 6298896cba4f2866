-- Events: the relay's lanes, what each consumer processed, the events a
-- consumer keeps failing on, and the tickets consumer's effect.

-- +goose Up

-- A booking's events go to one of 64 lanes. A relay publishes only from
-- lanes it has locked (outbox_lane rows, FOR UPDATE SKIP LOCKED), so one
-- booking's events are published by one relay at a time, in id order, even
-- with several relays running. Skipping locked *rows* instead would let a
-- second relay publish a booking's later event while the first still holds
-- its earlier one. Changing the lane count needs a migration, and no relay
-- may run during it.
ALTER TABLE outbox ADD COLUMN lane smallint GENERATED ALWAYS AS ((booking_id % 64)::smallint) STORED;
CREATE INDEX outbox_lane_unpublished_idx ON outbox (lane, id) WHERE published_at IS NULL;

CREATE TABLE outbox_lane (
    lane smallint PRIMARY KEY,
    CONSTRAINT outbox_lane_check CHECK (lane BETWEEN 0 AND 63)
);
INSERT INTO outbox_lane (lane) SELECT generate_series(0, 63);

-- Wake the relays as soon as events commit (NOTIFY is delivered at commit,
-- once per transaction for the same payload); they also poll, in case a
-- notification is missed.
-- +goose StatementBegin
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('berth_outbox', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- One row per event a consumer has processed, written in the same
-- transaction as the consumer's effect: a redelivered event finds its row
-- and is skipped. Deleted after the retention period.
CREATE TABLE consumer_event (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL,
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX consumer_event_processed_idx ON consumer_event (processed_at);

-- Events a consumer failed on, retried with backoff. While a booking has an
-- event parked for a consumer, that consumer's later events of the booking
-- are parked behind it (seq order), so they still arrive in order; other
-- bookings are not held up.
CREATE TABLE consumer_parked (
    seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    booking_id   bigint      NOT NULL,
    type         text        NOT NULL,
    event_time   timestamptz NOT NULL,
    data         jsonb       NOT NULL,
    attempts     integer     NOT NULL DEFAULT 0,
    next_attempt timestamptz NOT NULL,
    last_error   text        NOT NULL DEFAULT '',
    parked_at    timestamptz NOT NULL,
    CONSTRAINT consumer_parked_event_key UNIQUE (consumer, event_id)
);
CREATE INDEX consumer_parked_booking_idx ON consumer_parked (consumer, booking_id, seq);
CREATE INDEX consumer_parked_due_idx ON consumer_parked (next_attempt);

-- Tickets of confirmed flight bookings: one per seat, or per unit of a
-- quantity booking. (booking_id, unit) is unique, so a ticket can never be
-- issued twice, whatever a consumer does.
CREATE SEQUENCE ticket_serial_seq;
CREATE TABLE ticket (
    number     text        PRIMARY KEY,
    booking_id bigint      NOT NULL REFERENCES booking (id),
    unit       integer     NOT NULL,
    seat_no    text,
    status     text        NOT NULL DEFAULT 'ISSUED',
    event_id   uuid        NOT NULL,
    issued_at  timestamptz NOT NULL,
    voided_at  timestamptz,
    CONSTRAINT ticket_booking_unit_key UNIQUE (booking_id, unit),
    CONSTRAINT ticket_status_check CHECK ((status = 'ISSUED' AND voided_at IS NULL) OR (status = 'VOID' AND voided_at IS NOT NULL)),
    CONSTRAINT ticket_unit_check CHECK (unit BETWEEN 1 AND 9)
);

-- The newest version of each flight booking the tickets consumer has seen,
-- so an older event arriving after a newer one is recognised and ignored.
CREATE TABLE ticket_booking (
    booking_id bigint  PRIMARY KEY,
    version    integer NOT NULL
);

-- What the check-in sync hook told the check-in system about each flight
-- booking, so that it reports a cancellation only for a booking it had
-- reported as confirmed.
CREATE TABLE checkin_booking (
    booking_id bigint  PRIMARY KEY,
    version    integer NOT NULL,
    status     text    NOT NULL
);

-- +goose Down
DROP TABLE checkin_booking;
DROP TABLE ticket_booking;
DROP TABLE ticket;
DROP SEQUENCE ticket_serial_seq;
DROP TABLE consumer_parked;
DROP TABLE consumer_event;
DROP TRIGGER outbox_notify ON outbox;
DROP FUNCTION outbox_notify();
DROP TABLE outbox_lane;
DROP INDEX outbox_lane_unpublished_idx;
ALTER TABLE outbox DROP COLUMN lane;
