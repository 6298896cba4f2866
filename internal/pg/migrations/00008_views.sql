-- What the web app and the host and operator views read: the cities cars
-- are rented in (with the time zone their times are shown in), an index for
-- a host's bookings, and the results of `berth audit`.

-- +goose Up
-- A car's city code (car.city) names one of these. Cars in a city that is
-- not listed are shown in UTC; operators add cities with plain INSERTs.
CREATE TABLE city (
    code text PRIMARY KEY,
    name text NOT NULL,
    tz   text NOT NULL,
    CONSTRAINT city_code_check CHECK (code ~ '^[A-Z]{2,8}$')
);
INSERT INTO city (code, name, tz) VALUES
    ('HN', 'Hanoi', 'Asia/Ho_Chi_Minh'),
    ('HCM', 'Ho Chi Minh City', 'Asia/Ho_Chi_Minh'),
    ('DN', 'Da Nang', 'Asia/Ho_Chi_Minh'),
    ('NT', 'Nha Trang', 'Asia/Ho_Chi_Minh'),
    ('PQ', 'Phu Quoc', 'Asia/Ho_Chi_Minh'),
    ('DL', 'Da Lat', 'Asia/Ho_Chi_Minh'),
    ('HP', 'Hai Phong', 'Asia/Ho_Chi_Minh'),
    ('CT', 'Can Tho', 'Asia/Ho_Chi_Minh');

-- GET /host/bookings: a host's bookings, newest first.
CREATE INDEX booking_host_idx ON booking (host_id, id DESC) WHERE host_id IS NOT NULL;

-- One row per `berth audit` run (or POST /admin/audit): what the admin
-- page shows as the last audit.
CREATE TABLE audit_run (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ran_at     timestamptz NOT NULL,
    ok         boolean     NOT NULL,
    -- audit.Result values as JSON.
    results    jsonb       NOT NULL
);

-- +goose Down
DROP TABLE audit_run;
DROP INDEX booking_host_idx;
DROP TABLE city;
