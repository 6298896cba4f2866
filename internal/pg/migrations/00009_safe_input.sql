-- Safe input: one plate per car however it is typed, cars only in known
-- cities, and money only in ISO 4217 currencies (checked in Go, where the
-- one list lives).

-- +goose Up
-- "30A-123.45", "30a 123.45" and "30A12345" are one plate: uniqueness is
-- on the letters and digits alone, upper case. Computed here, so no code
-- path can store a plate that dodges it.
ALTER TABLE car ADD COLUMN plate_key text
    GENERATED ALWAYS AS (upper(regexp_replace(plate, '[^A-Za-z0-9]', '', 'g'))) STORED;

-- Plates already stored twice under two spellings cannot be merged by a
-- migration (they are two cars with their own bookings): stop and name them.
-- +goose StatementBegin
DO $$
DECLARE dup text;
BEGIN
    SELECT string_agg(plate_key, ', ') INTO dup
    FROM (SELECT plate_key FROM car GROUP BY plate_key HAVING count(*) > 1) d;
    IF dup IS NOT NULL THEN
        RAISE EXCEPTION 'cars listed twice under differently written plates: %; retire one of each before migrating', dup;
    END IF;
END $$;
-- +goose StatementEnd

ALTER TABLE car DROP CONSTRAINT car_plate_key;
ALTER TABLE car ADD CONSTRAINT car_plate_key UNIQUE (plate_key);

-- A car's city is one of the city table's (the one list of cities). NOT
-- VALID: new and changed rows are checked; rows from before stay as they
-- are (shown in UTC, as before) until an operator validates it.
ALTER TABLE car ADD CONSTRAINT car_city_fkey FOREIGN KEY (city) REFERENCES city (code) NOT VALID;

-- +goose Down
ALTER TABLE car DROP CONSTRAINT car_city_fkey;
ALTER TABLE car DROP CONSTRAINT car_plate_key;
ALTER TABLE car DROP COLUMN plate_key;
ALTER TABLE car ADD CONSTRAINT car_plate_key UNIQUE (plate);
