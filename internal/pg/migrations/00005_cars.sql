-- Cars rented for periods of time. A car's calendar is its bookings: rows of
-- the shared booking table (kind 'car'), whose live ones PostgreSQL keeps
-- from overlapping with an exclusion constraint over the rented period
-- extended by the car's turnaround buffer. The buffer is added here, by a
-- trigger, so that no code path can forget it.

-- +goose Up
CREATE TABLE car (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The host who rents the car out (a user id, like booking.customer_id).
    host_id     bigint      NOT NULL,
    plate       text        NOT NULL,
    model       text        NOT NULL,
    -- A city code such as HN or HCM: what GET /cars?city= matches.
    city        text        NOT NULL,
    daily_price bigint      NOT NULL,
    deposit     bigint      NOT NULL,
    currency    text        NOT NULL,
    -- Cleaning and inspection time after every rental; a whole number of
    -- microseconds (no day or month part), so that adding it to a
    -- timestamptz never depends on a time zone.
    turnaround  interval    NOT NULL DEFAULT '0',
    created_at  timestamptz NOT NULL,
    CONSTRAINT car_plate_key UNIQUE (plate),
    CONSTRAINT car_plate_check CHECK (plate ~ '^[A-Z0-9][A-Z0-9.-]{1,19}$'),
    CONSTRAINT car_model_check CHECK (length(model) BETWEEN 1 AND 100),
    CONSTRAINT car_city_check CHECK (city ~ '^[A-Z]{2,8}$'),
    CONSTRAINT car_price_check CHECK (daily_price > 0 AND deposit >= 0),
    CONSTRAINT car_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT car_turnaround_check CHECK (
        turnaround >= interval '0' AND turnaround <= interval '48 hours'
        AND extract(day FROM turnaround) = 0 AND extract(month FROM turnaround) = 0)
);
-- The search walks one city's cars in id order and probes each one's
-- calendar through the exclusion constraint's index.
CREATE INDEX car_city_idx ON car (city, id);

-- The car columns of a booking. NULL for other kinds. There is no foreign
-- key to car, for the reason booking has none to flight: checking it would
-- lock the car row of every hold. The trigger below proves the car exists.
ALTER TABLE booking
    ADD COLUMN car_id       bigint,
    -- The rented period, pickup included, return excluded: [pickup, return).
    ADD COLUMN period       tstzrange,
    -- period extended by the car's turnaround: what the calendar blocks.
    -- Computed by booking_car_blocked, never by the application.
    ADD COLUMN blocked      tstzrange,
    -- daily_price × started 24-hour periods, when the booking was held.
    ADD COLUMN rental_price bigint,
    -- The UTC offset, in seconds, of the timestamps the client sent, so
    -- every answer about the booking renders its times the way the client
    -- wrote them. NULL renders in UTC.
    ADD COLUMN utc_offset   integer,
    ADD CONSTRAINT booking_car_check CHECK (kind <> 'car' OR (
        car_id IS NOT NULL AND host_id IS NOT NULL AND rental_price >= 0
        AND period IS NOT NULL AND NOT isempty(period)
        AND lower_inc(period) AND NOT upper_inc(period)
        AND NOT lower_inf(period) AND NOT upper_inf(period)
        AND starts_at = lower(period)
        AND blocked IS NOT NULL AND lower(blocked) = lower(period) AND upper(blocked) >= upper(period)
        AND flight_id IS NULL AND fare_class IS NULL AND seats IS NULL AND quantity IS NULL)),
    ADD CONSTRAINT booking_not_car_check CHECK (kind = 'car' OR (
        car_id IS NULL AND period IS NULL AND blocked IS NULL AND rental_price IS NULL)),
    ADD CONSTRAINT booking_utc_offset_check CHECK (utc_offset BETWEEN -64800 AND 64800);

-- +goose StatementBegin
CREATE FUNCTION booking_car_blocked() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    buffer interval;
BEGIN
    SELECT turnaround INTO buffer FROM car WHERE id = NEW.car_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'car % does not exist', NEW.car_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'booking_car_fkey';
    END IF;
    NEW.blocked := tstzrange(lower(NEW.period), upper(NEW.period) + buffer, '[)');
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- Any write that could change the blocked range recomputes it, including a
-- write to blocked itself.
CREATE TRIGGER booking_car_blocked
    BEFORE INSERT OR UPDATE OF car_id, period, blocked ON booking
    FOR EACH ROW WHEN (NEW.kind = 'car')
    EXECUTE FUNCTION booking_car_blocked();

-- The rule that makes a double booking impossible: two live bookings of one
-- car never block overlapping time. Its index also serves every calendar
-- lookup (kind = 'car' AND car_id = $1 AND blocked && $2). The predicate
-- names the kind, which changes nothing for cars (only they have a car_id)
-- but keeps every live flight booking out of this index, so flight holds
-- do not pay for an index they can never conflict in.
ALTER TABLE booking ADD CONSTRAINT booking_car_no_overlap
    EXCLUDE USING gist (car_id WITH =, blocked WITH &&) WHERE (kind = 'car' AND status IN ('HELD', 'CONFIRMED', 'ON_TRIP'));

-- +goose Down
ALTER TABLE booking DROP CONSTRAINT booking_car_no_overlap;
DROP TRIGGER booking_car_blocked ON booking;
DROP FUNCTION booking_car_blocked();
DELETE FROM booking WHERE kind = 'car';
ALTER TABLE booking
    DROP CONSTRAINT booking_utc_offset_check,
    DROP CONSTRAINT booking_not_car_check,
    DROP CONSTRAINT booking_car_check,
    DROP COLUMN utc_offset,
    DROP COLUMN rental_price,
    DROP COLUMN blocked,
    DROP COLUMN period,
    DROP COLUMN car_id;
DROP TABLE car;
