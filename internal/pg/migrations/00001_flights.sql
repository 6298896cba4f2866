-- The flight inventory and the booking lifecycle shared by every kind of
-- inventory. Constraints carry names so that the Go code recognises which
-- rule the database enforced (pg.Violates).

-- +goose Up
CREATE EXTENSION IF NOT EXISTS btree_gist;

CREATE TABLE airport (
    code text PRIMARY KEY,
    name text NOT NULL,
    city text NOT NULL,
    country text NOT NULL,
    tz   text NOT NULL,
    CONSTRAINT airport_code_check CHECK (code ~ '^[A-Z]{3}$')
);

CREATE TABLE flight (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code           text        NOT NULL,
    origin         text        NOT NULL REFERENCES airport (code),
    destination    text        NOT NULL REFERENCES airport (code),
    departure_at   timestamptz NOT NULL,
    arrival_at     timestamptz NOT NULL,
    -- The departure date in the origin's time zone, what GET /flights?date= means.
    departure_date date        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT flight_code_check CHECK (code ~ '^[A-Z0-9]{2,3}[0-9]{1,5}$'),
    CONSTRAINT flight_route_check CHECK (origin <> destination),
    CONSTRAINT flight_times_check CHECK (arrival_at > departure_at),
    CONSTRAINT flight_code_departure_key UNIQUE (code, departure_at)
);
CREATE INDEX flight_search_idx ON flight (origin, destination, departure_date);

-- One row per fare class of a flight: its price, its refund rule and the
-- counters that make overselling impossible.
CREATE TABLE fare_inventory (
    flight_id      bigint  NOT NULL REFERENCES flight (id),
    fare_class     text    NOT NULL,
    price          bigint  NOT NULL,
    currency       text    NOT NULL,
    capacity       integer NOT NULL,
    overbook_limit integer NOT NULL DEFAULT 0,
    sold           integer NOT NULL DEFAULT 0,
    held           integer NOT NULL DEFAULT 0,
    -- policy.Rule as JSON; copied onto each booking when it is held.
    refund_rule    jsonb   NOT NULL,
    PRIMARY KEY (flight_id, fare_class),
    CONSTRAINT fare_class_check CHECK (fare_class ~ '^[A-Z][A-Z_]{0,15}$'),
    CONSTRAINT fare_price_check CHECK (price >= 0),
    CONSTRAINT fare_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT fare_capacity_check CHECK (capacity >= 0 AND overbook_limit >= 0),
    CONSTRAINT fare_counters_check CHECK (sold >= 0 AND held >= 0),
    CONSTRAINT fare_quota_check CHECK (sold + held <= capacity + overbook_limit)
);

-- The booking lifecycle, one table for every kind of inventory so that
-- statuses, payments, refunds and events have one path. Kind-specific
-- columns are NULL for the other kinds; later migrations add the car's.
--
-- There is deliberately no foreign key from booking to flight or
-- fare_inventory: checking it would take a KEY SHARE lock on the hottest row
-- of a sale for every hold. The hold's conditional counter update proves in
-- the same transaction that the fare exists, and flights are never deleted.
CREATE TABLE booking (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text        NOT NULL,
    status          text        NOT NULL,
    customer_id     bigint      NOT NULL,
    -- The host of a rented car, who may see and manage its bookings.
    host_id         bigint,
    amount          bigint      NOT NULL,
    currency        text        NOT NULL,
    -- When the hold ends; kept after the hold for audits (I4, I7).
    hold_expires_at timestamptz NOT NULL,
    -- When the service starts (departure, pickup): refund rules count back from it.
    starts_at       timestamptz NOT NULL,
    -- policy.Rule in force when the booking was held.
    refund_rule     jsonb       NOT NULL,
    flight_id       bigint,
    fare_class      text,
    -- The seat numbers held, sorted; NULL for a quantity hold.
    seats           text[],
    quantity        integer,
    cancel_reason   text,
    refund_amount   bigint,
    -- Bumped by every change, and carried by every event, so that consumers
    -- can tell an older state from a newer one.
    version         integer     NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    CONSTRAINT booking_kind_check CHECK (kind IN ('flight', 'car')),
    CONSTRAINT booking_status_check CHECK (status IN ('HELD', 'CONFIRMED', 'EXPIRED', 'CANCELLED', 'ON_TRIP', 'COMPLETED')),
    CONSTRAINT booking_amount_check CHECK (amount >= 0 AND currency ~ '^[A-Z]{3}$'),
    CONSTRAINT booking_flight_check CHECK (kind <> 'flight' OR (
        flight_id IS NOT NULL AND fare_class IS NOT NULL AND quantity BETWEEN 1 AND 9
        AND (seats IS NULL OR cardinality(seats) = quantity))),
    CONSTRAINT booking_cancel_check CHECK ((status = 'CANCELLED') = (cancel_reason IS NOT NULL)),
    CONSTRAINT booking_cancel_reason_check CHECK (cancel_reason IN ('customer', 'host', 'admin', 'payment_failed')),
    CONSTRAINT booking_refund_check CHECK (refund_amount IS NULL OR refund_amount BETWEEN 0 AND amount)
);
CREATE INDEX booking_customer_idx ON booking (customer_id, id DESC);
CREATE INDEX booking_hold_expiry_idx ON booking (hold_expires_at) WHERE status = 'HELD';
CREATE INDEX booking_flight_idx ON booking (flight_id, fare_class) WHERE flight_id IS NOT NULL;

-- One row per seat. A seat is taken only by a conditional UPDATE that counts
-- the rows it touched (flight.holdSeats).
CREATE TABLE seat (
    flight_id  bigint NOT NULL,
    seat_no    text   NOT NULL,
    fare_class text   NOT NULL,
    status     text   NOT NULL DEFAULT 'AVAILABLE',
    booking_id bigint REFERENCES booking (id),
    held_until timestamptz,
    PRIMARY KEY (flight_id, seat_no),
    FOREIGN KEY (flight_id, fare_class) REFERENCES fare_inventory (flight_id, fare_class),
    CONSTRAINT seat_no_check CHECK (seat_no ~ '^[0-9]{1,3}[A-Z]$'),
    CONSTRAINT seat_status_check CHECK (
        (status = 'AVAILABLE' AND booking_id IS NULL AND held_until IS NULL) OR
        (status = 'HELD' AND booking_id IS NOT NULL AND held_until IS NOT NULL) OR
        (status = 'SOLD' AND booking_id IS NOT NULL AND held_until IS NULL))
);
CREATE INDEX seat_booking_idx ON seat (booking_id) WHERE booking_id IS NOT NULL;

-- The transactional outbox: every booking state change writes one row in
-- the same transaction. The relay publishes rows in id order.
CREATE TABLE outbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id     uuid        NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    booking_id   bigint      NOT NULL,
    type         text        NOT NULL,
    payload      jsonb       NOT NULL,
    created_at   timestamptz NOT NULL,
    published_at timestamptz
);
CREATE INDEX outbox_unpublished_idx ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_booking_idx ON outbox (booking_id, id);

-- +goose Down
DROP TABLE outbox;
DROP TABLE seat;
DROP TABLE booking;
DROP TABLE fare_inventory;
DROP TABLE flight;
DROP TABLE airport;
