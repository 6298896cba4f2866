-- The fare counter split into buckets, so that concurrent holds of one hot
-- fare class need not all queue on one row. Each bucket has a share of the
-- class quota and its own CHECK; the shares always add up exactly to
-- capacity + overbook_limit (checked at commit), so the class quota and the
-- overbooking limit stay exact however the units are spread.

-- +goose Up
CREATE TABLE fare_bucket (
    flight_id  bigint   NOT NULL,
    fare_class text     NOT NULL,
    bucket     smallint NOT NULL,
    quota      integer  NOT NULL,
    sold       integer  NOT NULL DEFAULT 0,
    held       integer  NOT NULL DEFAULT 0,
    PRIMARY KEY (flight_id, fare_class, bucket),
    FOREIGN KEY (flight_id, fare_class) REFERENCES fare_inventory (flight_id, fare_class),
    CONSTRAINT fare_bucket_counters_check CHECK (sold >= 0 AND held >= 0 AND quota >= 0 AND bucket >= 0),
    CONSTRAINT fare_bucket_quota_check CHECK (sold + held <= quota)
);

INSERT INTO fare_bucket (flight_id, fare_class, bucket, quota, sold, held)
SELECT flight_id, fare_class, 0, capacity + overbook_limit, sold, held FROM fare_inventory;

ALTER TABLE fare_inventory
    DROP CONSTRAINT fare_quota_check,
    DROP CONSTRAINT fare_counters_check,
    DROP COLUMN sold,
    DROP COLUMN held;

-- The bucket a flight booking's units were taken from, so that selling and
-- releasing them moves the same bucket's counters.
ALTER TABLE booking ADD COLUMN fare_bucket smallint;
UPDATE booking SET fare_bucket = 0 WHERE kind = 'flight';
ALTER TABLE booking ADD CONSTRAINT booking_fare_bucket_check CHECK (kind <> 'flight' OR fare_bucket IS NOT NULL);

-- +goose StatementBegin
CREATE FUNCTION fare_quota_exact() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    f bigint := CASE WHEN TG_OP = 'DELETE' THEN OLD.flight_id ELSE NEW.flight_id END;
    c text   := CASE WHEN TG_OP = 'DELETE' THEN OLD.fare_class ELSE NEW.fare_class END;
    want integer;
    got integer;
BEGIN
    SELECT capacity + overbook_limit INTO want FROM fare_inventory WHERE flight_id = f AND fare_class = c;
    SELECT coalesce(sum(quota), 0) INTO got FROM fare_bucket WHERE flight_id = f AND fare_class = c;
    IF want IS DISTINCT FROM got THEN
        RAISE EXCEPTION 'fare % of flight %: bucket quotas add up to %, not capacity + overbook limit %', c, f, got, want
            USING ERRCODE = 'check_violation', CONSTRAINT = 'fare_quota_exact';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE CONSTRAINT TRIGGER fare_bucket_quota_exact
    AFTER INSERT OR DELETE OR UPDATE OF quota ON fare_bucket
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fare_quota_exact();
CREATE CONSTRAINT TRIGGER fare_inventory_quota_exact
    AFTER INSERT OR UPDATE OF capacity, overbook_limit ON fare_inventory
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fare_quota_exact();

-- +goose Down
DROP TRIGGER fare_inventory_quota_exact ON fare_inventory;
DROP TRIGGER fare_bucket_quota_exact ON fare_bucket;
DROP FUNCTION fare_quota_exact();
ALTER TABLE booking DROP CONSTRAINT booking_fare_bucket_check, DROP COLUMN fare_bucket;
ALTER TABLE fare_inventory ADD COLUMN sold integer NOT NULL DEFAULT 0, ADD COLUMN held integer NOT NULL DEFAULT 0;
UPDATE fare_inventory fi SET sold = b.sold, held = b.held
FROM (SELECT flight_id, fare_class, sum(sold)::int AS sold, sum(held)::int AS held FROM fare_bucket GROUP BY 1, 2) b
WHERE fi.flight_id = b.flight_id AND fi.fare_class = b.fare_class;
ALTER TABLE fare_inventory ADD CONSTRAINT fare_counters_check CHECK (sold >= 0 AND held >= 0),
    ADD CONSTRAINT fare_quota_check CHECK (sold + held <= capacity + overbook_limit);
DROP TABLE fare_bucket;
