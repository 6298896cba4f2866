-- Beyond the seeds: one extension per hold, and waitlists for sold-out fare
-- classes whose freed units are offered, in the transaction that frees them,
-- as HELD quantity bookings.

-- +goose Up
-- When the hold was extended (POST /bookings/{id}/extend); NULL while it was
-- not. A hold is extended at most once.
ALTER TABLE booking ADD COLUMN extended_at timestamptz;

-- One customer's place in the line of a sold-out fare class. WAITING until
-- units that fit are freed; then OFFERED with the HELD booking made for it;
-- DONE once that booking left HELD (paid, expired or cancelled); CANCELLED
-- when the customer left the line while waiting.
CREATE TABLE waitlist (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    flight_id   bigint      NOT NULL,
    fare_class  text        NOT NULL,
    customer_id bigint      NOT NULL,
    quantity    integer     NOT NULL,
    status      text        NOT NULL DEFAULT 'WAITING',
    booking_id  bigint REFERENCES booking (id),
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    FOREIGN KEY (flight_id, fare_class) REFERENCES fare_inventory (flight_id, fare_class),
    CONSTRAINT waitlist_quantity_check CHECK (quantity BETWEEN 1 AND 9),
    CONSTRAINT waitlist_status_check CHECK (status IN ('WAITING', 'OFFERED', 'DONE', 'CANCELLED')),
    -- An entry is offered once, with exactly one booking, and keeps it.
    CONSTRAINT waitlist_offer_check CHECK ((status IN ('OFFERED', 'DONE')) = (booking_id IS NOT NULL)),
    CONSTRAINT waitlist_booking_key UNIQUE (booking_id)
);
-- The line itself, in order: what a release walks.
CREATE INDEX waitlist_line_idx ON waitlist (flight_id, fare_class, id) WHERE status = 'WAITING';
CREATE INDEX waitlist_customer_idx ON waitlist (customer_id, id DESC);
-- A customer stands in a class's line once at a time (joining twice: 409).
CREATE UNIQUE INDEX waitlist_one_active_key ON waitlist (customer_id, flight_id, fare_class)
    WHERE status IN ('WAITING', 'OFFERED');

-- +goose Down
DROP TABLE waitlist;
ALTER TABLE booking DROP COLUMN extended_at;
