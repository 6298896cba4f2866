-- The waitlist decides in the database too: joining a line and offering
-- freed units to it are one function call each, placing units by
-- fare_allocate (00016), the rule a hold follows.

-- +goose Up

-- +goose StatementBegin
-- offer_freed offers the room of fare class p_class of flight p_flight to
-- the first WAITING entries of its line that fit, at p_now, within the
-- transaction that has just freed units of it (its bucket rows changed, or
-- the class quota grew). An entry is offered its whole quantity or
-- nothing, placed by fare_allocate as a hold of that quantity would be;
-- one that does not fit keeps its place while smaller ones behind it are
-- served. Each offer is a HELD quantity booking until p_now + p_ttl (never
-- past departure), the entry OFFERED with it, and the events booking.held
-- and waitlist.offered. Nothing is offered on a departed flight.
--
-- Locks: the line's WAITING entries in line order, then every bucket of the
-- class in bucket order (docs/invariants.md, race 10). Returns how many
-- entries were offered.
CREATE FUNCTION offer_freed(p_flight bigint, p_class text, p_now timestamptz, p_ttl interval)
    RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    e_id        bigint[];
    e_customer  bigint[];
    e_quantity  integer[];
    v_departure timestamptz;
    v_price     bigint;
    v_currency  text;
    v_rule      jsonb;
    b_class     text[];
    b_n         smallint[];
    b_quota     integer[];
    b_used      integer[];
    b_held      integer[];
    b_quota0    integer[];
    b_held0     integer[];
    v_quota     integer[];
    room        integer;
    t           integer;
    i           integer;
    o_i         integer[] := '{}';
    o_bucket    smallint[] := '{}';
    v_ids       bigint[];
    v_rows      booking[];
    v_check     text[];
    v_want      text[];
    cnt         bigint;
BEGIN
    SELECT array_agg(w.id ORDER BY w.id), array_agg(w.customer_id ORDER BY w.id), array_agg(w.quantity ORDER BY w.id)
    INTO e_id, e_customer, e_quantity
    FROM (SELECT x.id, x.customer_id, x.quantity FROM waitlist x
          WHERE x.flight_id = p_flight AND x.fare_class = p_class AND x.status = 'WAITING'
          ORDER BY x.id FOR UPDATE) AS w;
    IF e_id IS NULL THEN
        RETURN 0;
    END IF;

    SELECT f.departure_at, fi.price, fi.currency, fi.refund_rule INTO v_departure, v_price, v_currency, v_rule
    FROM flight f JOIN fare_inventory fi ON fi.flight_id = f.id AND fi.fare_class = p_class
    WHERE f.id = p_flight;
    IF NOT FOUND OR v_departure <= p_now THEN
        RETURN 0;
    END IF;

    SELECT array_agg(fb.fare_class ORDER BY fb.bucket), array_agg(fb.bucket ORDER BY fb.bucket),
           array_agg(fb.quota ORDER BY fb.bucket), array_agg(fb.sold + fb.held ORDER BY fb.bucket),
           array_agg(fb.held ORDER BY fb.bucket), sum(fb.quota - fb.sold - fb.held)
    INTO b_class, b_n, b_quota, b_used, b_held, room
    FROM (SELECT * FROM fare_bucket x WHERE x.flight_id = p_flight AND x.fare_class = p_class
          ORDER BY x.bucket FOR UPDATE) AS fb;
    b_quota0 := b_quota;
    b_held0 := b_held;

    FOR i IN 1 .. cardinality(e_id) LOOP
        EXIT WHEN coalesce(room, 0) <= 0;
        SELECT a.o_target, a.o_quota INTO t, v_quota
        FROM fare_allocate(b_class, b_quota, b_used, p_class, e_quantity[i]) AS a;
        CONTINUE WHEN t IS NULL; -- keeps its place; a smaller entry behind may fit
        b_quota := v_quota;
        b_used[t] := b_used[t] + e_quantity[i];
        b_held[t] := b_held[t] + e_quantity[i];
        room := room - e_quantity[i];
        o_i := o_i || i;
        o_bucket := o_bucket || b_n[t];
    END LOOP;
    IF cardinality(o_i) = 0 THEN
        RETURN 0;
    END IF;

    -- The offers, in line order: identity values are drawn in insertion
    -- order, which follows the ORDER BY, so the ids sorted pair with the
    -- entries sorted (checked, not trusted).
    WITH ins AS (
        INSERT INTO booking (kind, status, customer_id, amount, currency, hold_expires_at, starts_at,
            refund_rule, flight_id, fare_class, seats, quantity, fare_bucket, created_at, updated_at)
        SELECT 'flight', 'HELD', e_customer[u.i], v_price * e_quantity[u.i], v_currency,
            least(p_now + p_ttl, v_departure), v_departure, v_rule, p_flight, p_class, NULL, e_quantity[u.i],
            u.bucket, p_now, p_now
        FROM unnest(o_i, o_bucket) AS u(i, bucket)
        ORDER BY u.i
        RETURNING *)
    SELECT array_agg(ins.id ORDER BY ins.id), array_agg(ins::booking ORDER BY ins.id),
           array_agg(ins.customer_id || ' ' || ins.quantity ORDER BY ins.id)
    INTO v_ids, v_rows, v_check FROM ins;
    SELECT array_agg(e_customer[u.i] || ' ' || e_quantity[u.i] ORDER BY u.i) INTO v_want FROM unnest(o_i) AS u(i);
    IF v_check IS DISTINCT FROM v_want THEN
        RAISE EXCEPTION 'offer_freed: bookings returned out of order';
    END IF;

    UPDATE waitlist w SET status = 'OFFERED', booking_id = u.booking, updated_at = p_now
    FROM unnest(o_i, v_ids) AS u(i, booking)
    WHERE w.id = e_id[u.i] AND w.status = 'WAITING';
    GET DIAGNOSTICS cnt = ROW_COUNT;
    IF cnt <> cardinality(o_i) THEN
        RAISE EXCEPTION 'offer_freed: % of % entries of flight % were still waiting', cnt, cardinality(o_i), p_flight;
    END IF;

    INSERT INTO outbox (booking_id, type, payload, created_at)
    SELECT b.id, e.type, flight_booking_view(b), p_now
    FROM unnest(v_rows) AS b, (VALUES (1, 'booking.held'), (2, 'waitlist.offered')) AS e(ord, type)
    ORDER BY b.id, e.ord;

    UPDATE fare_bucket fb SET quota = u.quota, held = u.held
    FROM unnest(b_n, b_quota, b_held, b_quota0, b_held0) AS u(bucket, quota, held, quota0, held0)
    WHERE fb.flight_id = p_flight AND fb.fare_class = p_class AND fb.bucket = u.bucket
      AND (u.quota <> u.quota0 OR u.held <> u.held0);
    RETURN cardinality(o_i);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- join_waitlist puts customer p_customer in the line of fare class p_class
-- of flight p_flight for p_quantity units, at p_now, if the class cannot
-- serve that quantity to a hold now (fare_allocate finds no place for it)
-- or its line waits already; then it offers the line what it can at once
-- (offer_freed, offers lasting p_ttl): room kept for an entry that does
-- not fit yet goes to a smaller one joining behind it.
--
-- Locks every bucket of the class in bucket order before it looks at the
-- room, so a join and a release are serialised (docs/invariants.md,
-- race 10). A customer already in the line violates
-- waitlist_one_active_key.
--
-- It returns one row: o_code NULL and the entry's id, or an error code and
-- its detail (Go words the error): no_flight, no_class, departed, room
-- (detail: the units left).
CREATE FUNCTION join_waitlist(p_flight bigint, p_class text, p_customer bigint, p_quantity integer,
        p_now timestamptz, p_ttl interval)
    RETURNS TABLE (o_code text, o_detail text, o_id bigint)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_departure timestamptz;
    b_class     text[];
    b_quota     integer[];
    b_used      integer[];
    v_room      integer;
    v_queued    boolean;
    v_id        bigint;
BEGIN
    SELECT f.departure_at INTO v_departure FROM flight f WHERE f.id = p_flight;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'no_flight'::text, NULL::text, NULL::bigint;
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM fare_inventory fi WHERE fi.flight_id = p_flight AND fi.fare_class = p_class) THEN
        RETURN QUERY SELECT 'no_class'::text, NULL::text, NULL::bigint;
        RETURN;
    END IF;
    IF v_departure <= p_now THEN
        RETURN QUERY SELECT 'departed'::text, NULL::text, NULL::bigint;
        RETURN;
    END IF;

    SELECT array_agg(fb.fare_class ORDER BY fb.bucket), array_agg(fb.quota ORDER BY fb.bucket),
           array_agg(fb.sold + fb.held ORDER BY fb.bucket), sum(fb.quota - fb.sold - fb.held)
    INTO b_class, b_quota, b_used, v_room
    FROM (SELECT * FROM fare_bucket x WHERE x.flight_id = p_flight AND x.fare_class = p_class
          ORDER BY x.bucket FOR UPDATE) AS fb;
    -- Read under the bucket locks (a new statement, a new snapshot): a
    -- release that committed before them has offered its units already.
    SELECT EXISTS (SELECT 1 FROM waitlist w WHERE w.flight_id = p_flight AND w.fare_class = p_class
        AND w.status = 'WAITING') INTO v_queued;
    IF NOT v_queued AND (SELECT a.o_target FROM fare_allocate(b_class, b_quota, b_used, p_class, p_quantity) AS a) IS NOT NULL THEN
        RETURN QUERY SELECT 'room'::text, v_room::text, NULL::bigint;
        RETURN;
    END IF;

    INSERT INTO waitlist (flight_id, fare_class, customer_id, quantity, created_at, updated_at)
    VALUES (p_flight, p_class, p_customer, p_quantity, p_now, p_now) RETURNING id INTO v_id;
    PERFORM offer_freed(p_flight, p_class, p_now, p_ttl);
    RETURN QUERY SELECT NULL::text, NULL::text, v_id;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION join_waitlist(bigint, text, bigint, integer, timestamptz, interval);
DROP FUNCTION offer_freed(bigint, text, timestamptz, interval);
