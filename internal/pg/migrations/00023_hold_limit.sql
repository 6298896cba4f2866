-- The per-customer hold limit (BERTH_HOLD_LIMIT) is decided by the
-- database, in the hold's own transaction, instead of by a Redis script
-- before it: a hold costs one round trip (to PostgreSQL) instead of two,
-- and the limit is exact however many processes serve holds.
--
-- hold_allowance takes a transaction-scoped advisory lock per customer, so
-- that two holds of one customer are decided one after the other, and
-- counts the customer's bookings made within the window (the newest
-- p_limit of them, by the booking_customer_idx index). hold_flight calls
-- it first, and answers hold_limit for a request over the limit; a car
-- hold calls it before locking the car.

-- +goose Up

-- +goose StatementBegin
-- hold_allowance locks each of p_customers' hold limits (in key order, so
-- that batches lock them in one order) and returns, per customer, how many
-- holds are left of p_limit within p_window before p_now, and how long
-- until the oldest of those holds leaves the window (all of p_window if
-- none is in it: the holds about to be made are then the oldest). Every
-- booking the customer made counts, whatever became of it. The locks are
-- held until the transaction ends; a transaction that holds for a
-- customer takes them before any other lock.
CREATE FUNCTION hold_allowance(p_customers bigint[], p_now timestamptz, p_limit integer, p_window interval)
    RETURNS TABLE (o_customer bigint, o_left integer, o_retry interval)
    LANGUAGE plpgsql
    AS $$
DECLARE
    k integer;
BEGIN
    FOR k IN SELECT DISTINCT hashint8(c) FROM unnest(p_customers) AS c ORDER BY 1 LOOP
        -- 1650815604 is "bert" in ASCII: this lock's class.
        PERFORM pg_advisory_xact_lock(1650815604, k);
    END LOOP;
    RETURN QUERY
    SELECT d.c, p_limit - count(r.created_at)::integer, coalesce(min(r.created_at), p_now) + p_window - p_now
    FROM (SELECT DISTINCT c FROM unnest(p_customers) AS c) AS d
    LEFT JOIN LATERAL (SELECT b.created_at FROM booking b WHERE b.customer_id = d.c
                       ORDER BY b.id DESC LIMIT p_limit) AS r ON r.created_at > p_now - p_window
    GROUP BY d.c;
END
$$;
-- +goose StatementEnd

DROP FUNCTION hold_flight(bigint, timestamptz, interval, bigint[], text[], text[], integer[], bigint[], text[], uuid[], boolean);

-- +goose StatementBegin
-- hold_flight holds the requests p_customers[i], p_classes[i], p_seats[i]
-- (seat numbers joined by commas, sorted; NULL for a quantity hold) or
-- p_units[i] (units of a quantity hold) on flight p_flight at p_now, for
-- p_ttl (never past departure). Each request is decided in order, all or
-- nothing, against the seats and keys locked, the buckets as read (see
-- below) and the requests before it. A request
-- made under an Idempotency-Key has p_key_callers[i], p_keys[i] and
-- p_leases[i] (else NULL): its effect ("booking:<id>") is recorded with the
-- booking, and a key a retry took over refuses the request. With p_limit
-- above zero, a customer may make at most p_limit holds per p_window
-- (hold_allowance decides, counting the holds of this batch too).
--
-- Lock order, as every transaction's: the customers' hold-limit locks
-- (hold_allowance; only holds take them, always first), seats in seat
-- order, then the fare
-- buckets of the batch's classes in class and bucket order (the new booking
-- rows lock nothing another transaction waits for). The waitlist and fares
-- are read without locks, as before a hold.
--
-- The buckets are the hottest rows of a sale: every hold of a class ends
-- on them. So they are locked as late as possible, last before the
-- commit: the requests are decided against the buckets as last committed
-- (read without a lock), the bookings, seats, events and keys written, and
-- only then are the buckets locked and the decided units applied to them
-- as they are now, share moved into each request's bucket as needed. If a
-- request no longer fits its class (another transaction took the room in
-- between) or its bucket is gone, the call raises SQLSTATE BH001 and
-- nothing is written; the caller then asks again with p_lock_first, which
-- locks the buckets before deciding, as every request was decided before.
-- A refusal (sold_out) decided on the unlocked read is an answer the
-- committed state gave; it writes nothing and locks no bucket.
--
-- The bookings are kept as inserted (RETURNING) for the events and the
-- answer, not read again.
--
-- It returns one row per request, in order: o_code NULL and the booking
-- made, or an error code and its detail (Go words the error):
--   no_flight, no_class, departed, queued (the class's waitlist waits),
--   no_seat (detail: the seat), seat_class (detail: "<seat> <its class>"),
--   seats_taken, sold_out, key_in_use, hold_limit (detail: seconds until
--   the customer may hold again).
-- Anything else raises, and nothing of the batch is written.
CREATE OR REPLACE FUNCTION hold_flight(p_flight bigint, p_now timestamptz, p_ttl interval,
        p_customers bigint[], p_classes text[], p_seats text[], p_units integer[],
        p_key_callers bigint[], p_keys text[], p_leases uuid[], p_lock_first boolean,
        p_limit integer, p_window interval)
    RETURNS TABLE (o_ord integer, o_code text, o_detail text, o_booking booking)
    LANGUAGE plpgsql
    -- Its statements take array parameters, whose custom plans PostgreSQL
    -- would otherwise make again on every call (their generic plans look
    -- costlier on paper): measured, the generic plans are the faster.
    SET plan_cache_mode = force_generic_plan
    AS $$
DECLARE
    n           integer := coalesce(cardinality(p_customers), 0);
    v_departure timestamptz;
    v_expires   timestamptz;
    v_code      text[] := array_fill(NULL::text, ARRAY[n]);
    v_detail    text[] := array_fill(NULL::text, ARRAY[n]);
    v_bucket    smallint[] := array_fill(NULL::smallint, ARRAY[n]);
    v_id        bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_keys_ok   bigint[];
    -- fares of the batch's classes
    c_class     text[];
    c_price     bigint[];
    c_currency  text[];
    c_rule      jsonb[];
    c_queued    boolean[];
    -- locked seats
    s_no        text[];
    s_class     text[];
    s_free      boolean[];
    s_claimed   boolean[];
    -- the buckets, in class and bucket order
    b_class     text[];
    b_n         smallint[];
    b_quota     integer[];
    b_used      integer[]; -- sold + held
    b_held      integer[];
    b_quota0    integer[];
    b_held0     integer[];
    -- the holds to write: request, fare index, units
    pl_i        integer[] := '{}';
    pl_ci       integer[] := '{}';
    pl_units    integer[] := '{}';
    v_new       bigint[];
    v_rows      booking[];
    v_row       booking[] := array_fill(NULL::booking, ARRAY[n]);
    v_one       booking;
    v_check     text[];
    v_want      text[];
    i           integer;
    j           integer;
    pk          integer;
    ci          integer;
    si          integer;
    t           integer;
    units       integer;
    v_quota     integer[];
    seat        text;
    rs          text[];
    cnt         bigint;
    v_keyed     integer := coalesce(cardinality(array_remove(p_key_callers, NULL)), 0);
    v_seated    boolean := coalesce(cardinality(array_remove(p_seats, NULL)), 0) > 0;
    v_moved     boolean := false;
    -- what the requests placed add up to: seats, units, and whether all
    -- went to one bucket (v_one_class, v_one_bucket) or not (v_many)
    v_seat_total integer := 0;
    v_unit_total integer := 0;
    v_one_class  text;
    v_one_bucket smallint;
    v_many       boolean := false;
    v_key_total  integer := 0;
    v_applied    boolean := false;
    -- the hold limit: what each of the batch's customers has left
    h_customer  bigint[];
    h_left      integer[];
    h_retry     interval[];
    hi          integer;
BEGIN
    -- The flight and the requested fares in one statement.
    SELECT f.departure_at, array_agg(fi.fare_class), array_agg(fi.price), array_agg(fi.currency), array_agg(fi.refund_rule),
           array_agg(EXISTS (SELECT 1 FROM waitlist w WHERE w.flight_id = fi.flight_id
               AND w.fare_class = fi.fare_class AND w.status = 'WAITING'))
    INTO v_departure, c_class, c_price, c_currency, c_rule, c_queued
    FROM flight f LEFT JOIN fare_inventory fi ON fi.flight_id = f.id AND fi.fare_class = ANY (p_classes)
    WHERE f.id = p_flight
    GROUP BY f.departure_at;
    IF NOT FOUND THEN
        RETURN QUERY SELECT g.i, 'no_flight'::text, NULL::text, NULL::booking
            FROM generate_series(1, n) AS g(i) ORDER BY g.i;
        RETURN;
    END IF;
    v_expires := least(p_now + p_ttl, v_departure);

    IF p_limit > 0 THEN
        SELECT array_agg(a.o_customer), array_agg(a.o_left), array_agg(a.o_retry)
        INTO h_customer, h_left, h_retry
        FROM hold_allowance(p_customers, p_now, p_limit, p_window) AS a;
    END IF;

    -- A flight without any of the classes: no fare at all.
    c_class := array_remove(c_class, NULL);

    -- The keys whose requests still hold them, locked against a retry
    -- taking one over before the commit.
    IF v_keyed > 0 THEN
        SELECT array_agg(k.ord) INTO v_keys_ok FROM (
            SELECT u.ord FROM unnest(p_key_callers, p_keys, p_leases) WITH ORDINALITY AS u(caller, idem, lease, ord)
            JOIN idempotency_key ik ON ik.caller_id = u.caller AND ik.idem_key = u.idem AND ik.lease = u.lease
                AND ik.response_status IS NULL
            ORDER BY ik.caller_id, ik.idem_key FOR UPDATE OF ik) AS k;
    END IF;

    IF v_seated THEN
        -- The three arrays come from one aggregation of the same rows, so
        -- they pair up; their order is not used (seats are found by
        -- array_position), so the aggregates sort nothing.
        SELECT array_agg(s.seat_no), array_agg(s.fare_class),
               array_agg(s.status = 'AVAILABLE' OR (s.status = 'HELD' AND s.held_until <= p_now))
        INTO s_no, s_class, s_free
        FROM (SELECT st.seat_no, st.fare_class, st.status, st.held_until FROM seat st
              WHERE st.flight_id = p_flight
                AND st.seat_no = ANY (string_to_array(array_to_string(p_seats, ','), ','))
              ORDER BY st.seat_no FOR UPDATE) AS s;
    END IF;
    s_claimed := array_fill(false, ARRAY[coalesce(cardinality(s_no), 0)]);

    -- The buckets as last committed; locked first only when asked (the
    -- statement after the lock sees what the lock waited for).
    IF p_lock_first THEN
        PERFORM FROM fare_bucket x WHERE x.flight_id = p_flight AND x.fare_class = ANY (p_classes)
            ORDER BY x.fare_class, x.bucket FOR UPDATE;
    END IF;
    -- In class and bucket order: the aggregates take the rows as the
    -- subquery sorted them (one sort, not one per aggregate).
    SELECT array_agg(fb.fare_class), array_agg(fb.bucket), array_agg(fb.quota), array_agg(fb.sold + fb.held),
           array_agg(fb.held)
    INTO b_class, b_n, b_quota, b_used, b_held
    FROM (SELECT x.fare_class, x.bucket, x.quota, x.sold, x.held FROM fare_bucket x
          WHERE x.flight_id = p_flight AND x.fare_class = ANY (p_classes)
          ORDER BY x.fare_class, x.bucket) AS fb;

    FOR i IN 1 .. n LOOP
        ci := array_position(c_class, p_classes[i]);
        IF ci IS NULL THEN
            v_code[i] := 'no_class';
            CONTINUE;
        END IF;
        IF v_departure <= p_now THEN
            v_code[i] := 'departed';
            CONTINUE;
        END IF;
        IF c_queued[ci] THEN
            v_code[i] := 'queued';
            CONTINUE;
        END IF;

        rs := string_to_array(p_seats[i], ',');
        units := coalesce(cardinality(rs), p_units[i]);
        -- Every seat exists and is of the class; then every one is free
        -- and not taken by an earlier request of the batch.
        FOREACH seat IN ARRAY coalesce(rs, '{}') LOOP
            si := array_position(s_no, seat);
            IF si IS NULL THEN
                v_code[i] := 'no_seat';
                v_detail[i] := seat;
                EXIT;
            ELSIF s_class[si] <> p_classes[i] THEN
                v_code[i] := 'seat_class';
                v_detail[i] := seat || ' ' || s_class[si];
                EXIT;
            END IF;
        END LOOP;
        IF v_code[i] IS NOT NULL THEN
            CONTINUE;
        END IF;
        FOREACH seat IN ARRAY coalesce(rs, '{}') LOOP
            si := array_position(s_no, seat);
            IF NOT s_free[si] OR s_claimed[si] THEN
                v_code[i] := 'seats_taken';
                EXIT;
            END IF;
        END LOOP;
        IF v_code[i] IS NOT NULL THEN
            CONTINUE;
        END IF;

        -- The class's room, placed by fare_allocate; a class of one
        -- bucket (the usual case) places its units in it without the call,
        -- as fare_allocate would: no share to move.
        t := array_position(b_class, p_classes[i]);
        IF t IS NOT NULL AND array_position(b_class, p_classes[i], t + 1) IS NULL THEN
            IF b_quota[t] - b_used[t] < units THEN
                t := NULL;
            END IF;
            v_quota := b_quota;
        ELSE
            SELECT a.o_target, a.o_quota INTO t, v_quota
            FROM fare_allocate(b_class, b_quota, b_used, p_classes[i], units) AS a;
        END IF;
        IF t IS NULL THEN
            v_code[i] := 'sold_out';
            v_detail[i] := units::text;
            CONTINUE;
        END IF;
        IF p_key_callers[i] IS NOT NULL AND NOT (i = ANY (coalesce(v_keys_ok, '{}'))) THEN
            v_code[i] := 'key_in_use';
            CONTINUE;
        END IF;
        IF h_customer IS NOT NULL THEN
            hi := array_position(h_customer, p_customers[i]);
            IF h_left[hi] <= 0 THEN
                v_code[i] := 'hold_limit';
                v_detail[i] := ceil(extract(epoch FROM h_retry[hi]))::text;
                CONTINUE;
            END IF;
            h_left[hi] := h_left[hi] - 1;
        END IF;
        v_moved := v_moved OR v_quota IS DISTINCT FROM b_quota;
        b_quota := v_quota;
        b_used[t] := b_used[t] + units;
        b_held[t] := b_held[t] + units;
        FOREACH seat IN ARRAY coalesce(rs, '{}') LOOP
            s_claimed[array_position(s_no, seat)] := true;
        END LOOP;
        v_bucket[i] := b_n[t];
        v_seat_total := v_seat_total + coalesce(cardinality(rs), 0);
        v_unit_total := v_unit_total + units;
        IF p_key_callers[i] IS NOT NULL THEN
            v_key_total := v_key_total + 1;
        END IF;
        IF v_one_class IS NULL THEN
            v_one_class := p_classes[i];
            v_one_bucket := b_n[t];
        ELSIF v_one_class <> p_classes[i] OR v_one_bucket <> b_n[t] THEN
            v_many := true;
        END IF;
        pl_i := pl_i || i;
        pl_ci := pl_ci || ci;
        pl_units := pl_units || units;
    END LOOP;

    IF cardinality(pl_i) = 1 THEN
        -- One booking (the everyday hold): inserted as it is, nothing to
        -- pair up.
        i := pl_i[1];
        ci := pl_ci[1];
        INSERT INTO booking (kind, status, customer_id, amount, currency, hold_expires_at, starts_at,
            refund_rule, flight_id, fare_class, seats, quantity, fare_bucket, created_at, updated_at)
        VALUES ('flight', 'HELD', p_customers[i], c_price[ci] * pl_units[1], c_currency[ci], v_expires,
            v_departure, c_rule[ci], p_flight, p_classes[i], string_to_array(p_seats[i], ','), pl_units[1],
            v_bucket[i], p_now, p_now)
        RETURNING * INTO v_one;
        v_id[i] := v_one.id;
        v_row[i] := v_one;
    ELSIF cardinality(pl_i) > 1 THEN
        -- The bookings, in request order: identity values are drawn in
        -- insertion order, which follows the ORDER BY, so the ids sorted
        -- pair with the requests sorted (checked, not trusted).
        WITH ins AS (
            INSERT INTO booking (kind, status, customer_id, amount, currency, hold_expires_at, starts_at,
                refund_rule, flight_id, fare_class, seats, quantity, fare_bucket, created_at, updated_at)
            SELECT 'flight', 'HELD', p_customers[u.i], c_price[u.ci] * u.units, c_currency[u.ci], v_expires,
                v_departure, c_rule[u.ci], p_flight, p_classes[u.i], string_to_array(p_seats[u.i], ','), u.units,
                v_bucket[u.i], p_now, p_now
            FROM unnest(pl_i, pl_ci, pl_units) AS u(i, ci, units)
            ORDER BY u.i
            RETURNING *)
        SELECT array_agg(ins.id ORDER BY ins.id), array_agg(ins::booking ORDER BY ins.id),
               array_agg(ins.customer_id || ' ' || ins.fare_class || ' ' || ins.quantity ORDER BY ins.id)
        INTO v_new, v_rows, v_check FROM ins;
        SELECT array_agg(p_customers[u.i] || ' ' || p_classes[u.i] || ' ' || u.units ORDER BY u.i)
        INTO v_want FROM unnest(pl_i, pl_units) AS u(i, units);
        IF v_check IS DISTINCT FROM v_want THEN
            RAISE EXCEPTION 'hold_flight: bookings returned out of order';
        END IF;
        FOR j IN 1 .. cardinality(pl_i) LOOP
            v_id[pl_i[j]] := v_new[j];
            v_row[pl_i[j]] := v_rows[j];
        END LOOP;
    END IF;

    IF cardinality(pl_i) > 0 THEN
        -- seat_no = ANY lets the planner fetch just these seats by the
        -- primary key.
        IF v_seated THEN
            WITH taken AS (
                SELECT v_id[u.i] AS booking_id, x AS seat_no
                FROM unnest(pl_i) AS u(i), unnest(string_to_array(p_seats[u.i], ',')) AS x)
            UPDATE seat s SET status = 'HELD', booking_id = tk.booking_id, held_until = v_expires
            FROM taken tk
            WHERE s.flight_id = p_flight AND s.seat_no = ANY (s_no) AND s.seat_no = tk.seat_no
              AND (s.status = 'AVAILABLE' OR (s.status = 'HELD' AND s.held_until <= p_now));
            GET DIAGNOSTICS cnt = ROW_COUNT;
            IF cnt <> v_seat_total THEN
                RAISE EXCEPTION 'hold_flight: only % seats of flight % were free', cnt, p_flight;
            END IF;
        END IF;

        IF cardinality(pl_i) = 1 THEN
            INSERT INTO outbox (booking_id, type, payload, created_at)
            VALUES (v_one.id, 'booking.held', flight_booking_view(v_one), p_now);
        ELSE
            INSERT INTO outbox (booking_id, type, payload, created_at)
            SELECT b.id, 'booking.held', flight_booking_view(b), p_now
            FROM unnest(v_rows) AS b ORDER BY b.id;
        END IF;

        IF v_keyed > 0 THEN
            UPDATE idempotency_key ik SET effect = 'booking:' || v_id[u.ord]
            FROM unnest(p_key_callers, p_keys, p_leases) WITH ORDINALITY AS u(caller, idem, lease, ord)
            WHERE v_id[u.ord] IS NOT NULL
              AND ik.caller_id = u.caller AND ik.idem_key = u.idem AND ik.lease = u.lease AND ik.response_status IS NULL;
            GET DIAGNOSTICS cnt = ROW_COUNT;
            IF cnt <> v_key_total THEN
                RAISE EXCEPTION 'hold_flight: % idempotency keys recorded', cnt;
            END IF;
        END IF;

        -- Now the buckets. When every request went to one bucket (a lone
        -- hold, or a batch of a class of one bucket) and no share moved,
        -- one conditional update locks it and applies the units if they
        -- still fit it as it is now: what the general step below would do
        -- then, without reading the buckets again.
        IF NOT v_moved AND NOT v_many THEN
            UPDATE fare_bucket fb SET held = fb.held + v_unit_total
            WHERE fb.flight_id = p_flight AND fb.fare_class = v_one_class AND fb.bucket = v_one_bucket
              AND fb.sold + fb.held + v_unit_total <= fb.quota;
            v_applied := FOUND;
        END IF;

        IF NOT v_applied THEN
            -- Else the buckets, locked as they are: each request's units go to
            -- the bucket decided above, with share moved into it from the
            -- others (bucket order) when it lacks room; a request the class
            -- has no room for any more sends the caller back (BH001).
            SELECT array_agg(fb.fare_class ORDER BY fb.fare_class, fb.bucket), array_agg(fb.bucket ORDER BY fb.fare_class, fb.bucket),
                   array_agg(fb.quota ORDER BY fb.fare_class, fb.bucket), array_agg(fb.sold + fb.held ORDER BY fb.fare_class, fb.bucket),
                   array_agg(fb.held ORDER BY fb.fare_class, fb.bucket)
            INTO b_class, b_n, b_quota, b_used, b_held
            FROM (SELECT * FROM fare_bucket x WHERE x.flight_id = p_flight AND x.fare_class = ANY (p_classes)
                  ORDER BY x.fare_class, x.bucket FOR UPDATE) AS fb;
            b_quota0 := b_quota;
            b_held0 := b_held;
            v_moved := false;
            FOR pk IN 1 .. cardinality(pl_i) LOOP
                i := pl_i[pk];
                units := pl_units[pk];
                SELECT a.o_target, a.o_quota INTO t, v_quota
                FROM fare_allocate(b_class, b_quota, b_used, p_classes[i], units, b_n, v_bucket[i]) AS a;
                IF t IS NULL THEN
                    RAISE EXCEPTION 'hold_flight: the fare buckets of flight % changed; lock them first', p_flight
                        USING ERRCODE = 'BH001';
                END IF;
                v_moved := v_moved OR v_quota IS DISTINCT FROM b_quota;
                b_quota := v_quota;
                b_used[t] := b_used[t] + units;
                b_held[t] := b_held[t] + units;
            END LOOP;

            -- Buckets whose share moved are written whole (the deferred
            -- trigger checks the shares still add up); the others only held.
            IF v_moved THEN
                UPDATE fare_bucket fb SET quota = u.quota, held = u.held
                FROM unnest(b_class, b_n, b_quota, b_held, b_quota0) AS u(fare_class, bucket, quota, held, quota0)
                WHERE fb.flight_id = p_flight AND fb.fare_class = u.fare_class AND fb.bucket = u.bucket
                  AND u.quota <> u.quota0;
            END IF;
            UPDATE fare_bucket fb SET held = u.held
            FROM unnest(b_class, b_n, b_quota, b_held, b_quota0, b_held0) AS u(fare_class, bucket, quota, held, quota0, held0)
            WHERE fb.flight_id = p_flight AND fb.fare_class = u.fare_class AND fb.bucket = u.bucket
              AND u.quota = u.quota0 AND u.held <> u.held0;
        END IF;
    END IF;

    FOR i IN 1 .. n LOOP
        o_ord := i;
        o_code := v_code[i];
        o_detail := v_detail[i];
        o_booking := v_row[i];
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd


-- +goose Down

DROP FUNCTION hold_flight(bigint, timestamptz, interval, bigint[], text[], text[], integer[], bigint[], text[], uuid[], boolean,
    integer, interval);

-- +goose StatementBegin
-- hold_flight holds the requests p_customers[i], p_classes[i], p_seats[i]
-- (seat numbers joined by commas, sorted; NULL for a quantity hold) or
-- p_units[i] (units of a quantity hold) on flight p_flight at p_now, for
-- p_ttl (never past departure). Each request is decided in order, all or
-- nothing, against the seats and keys locked, the buckets as read (see
-- below) and the requests before it. A request
-- made under an Idempotency-Key has p_key_callers[i], p_keys[i] and
-- p_leases[i] (else NULL): its effect ("booking:<id>") is recorded with the
-- booking, and a key a retry took over refuses the request.
--
-- Lock order, as every transaction's: seats in seat order, then the fare
-- buckets of the batch's classes in class and bucket order (the new booking
-- rows lock nothing another transaction waits for). The waitlist and fares
-- are read without locks, as before a hold.
--
-- The buckets are the hottest rows of a sale: every hold of a class ends
-- on them. So they are locked as late as possible, last before the
-- commit: the requests are decided against the buckets as last committed
-- (read without a lock), the bookings, seats, events and keys written, and
-- only then are the buckets locked and the decided units applied to them
-- as they are now, share moved into each request's bucket as needed. If a
-- request no longer fits its class (another transaction took the room in
-- between) or its bucket is gone, the call raises SQLSTATE BH001 and
-- nothing is written; the caller then asks again with p_lock_first, which
-- locks the buckets before deciding, as every request was decided before.
-- A refusal (sold_out) decided on the unlocked read is an answer the
-- committed state gave; it writes nothing and locks no bucket.
--
-- The bookings are kept as inserted (RETURNING) for the events and the
-- answer, not read again.
--
-- It returns one row per request, in order: o_code NULL and the booking
-- made, or an error code and its detail (Go words the error):
--   no_flight, no_class, departed, queued (the class's waitlist waits),
--   no_seat (detail: the seat), seat_class (detail: "<seat> <its class>"),
--   seats_taken, sold_out, key_in_use.
-- Anything else raises, and nothing of the batch is written.
CREATE OR REPLACE FUNCTION hold_flight(p_flight bigint, p_now timestamptz, p_ttl interval,
        p_customers bigint[], p_classes text[], p_seats text[], p_units integer[],
        p_key_callers bigint[], p_keys text[], p_leases uuid[], p_lock_first boolean)
    RETURNS TABLE (o_ord integer, o_code text, o_detail text, o_booking booking)
    LANGUAGE plpgsql
    -- Its statements take array parameters, whose custom plans PostgreSQL
    -- would otherwise make again on every call (their generic plans look
    -- costlier on paper): measured, the generic plans are the faster.
    SET plan_cache_mode = force_generic_plan
    AS $$
DECLARE
    n           integer := coalesce(cardinality(p_customers), 0);
    v_departure timestamptz;
    v_expires   timestamptz;
    v_code      text[] := array_fill(NULL::text, ARRAY[n]);
    v_detail    text[] := array_fill(NULL::text, ARRAY[n]);
    v_bucket    smallint[] := array_fill(NULL::smallint, ARRAY[n]);
    v_id        bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_keys_ok   bigint[];
    -- fares of the batch's classes
    c_class     text[];
    c_price     bigint[];
    c_currency  text[];
    c_rule      jsonb[];
    c_queued    boolean[];
    -- locked seats
    s_no        text[];
    s_class     text[];
    s_free      boolean[];
    s_claimed   boolean[];
    -- the buckets, in class and bucket order
    b_class     text[];
    b_n         smallint[];
    b_quota     integer[];
    b_used      integer[]; -- sold + held
    b_held      integer[];
    b_quota0    integer[];
    b_held0     integer[];
    -- the holds to write: request, fare index, units
    pl_i        integer[] := '{}';
    pl_ci       integer[] := '{}';
    pl_units    integer[] := '{}';
    v_new       bigint[];
    v_rows      booking[];
    v_row       booking[] := array_fill(NULL::booking, ARRAY[n]);
    v_one       booking;
    v_check     text[];
    v_want      text[];
    i           integer;
    j           integer;
    pk          integer;
    ci          integer;
    si          integer;
    t           integer;
    units       integer;
    v_quota     integer[];
    seat        text;
    rs          text[];
    cnt         bigint;
    v_keyed     integer := coalesce(cardinality(array_remove(p_key_callers, NULL)), 0);
    v_seated    boolean := coalesce(cardinality(array_remove(p_seats, NULL)), 0) > 0;
    v_moved     boolean := false;
    -- what the requests placed add up to: seats, units, and whether all
    -- went to one bucket (v_one_class, v_one_bucket) or not (v_many)
    v_seat_total integer := 0;
    v_unit_total integer := 0;
    v_one_class  text;
    v_one_bucket smallint;
    v_many       boolean := false;
    v_key_total  integer := 0;
    v_applied    boolean := false;
BEGIN
    -- The flight and the requested fares in one statement.
    SELECT f.departure_at, array_agg(fi.fare_class), array_agg(fi.price), array_agg(fi.currency), array_agg(fi.refund_rule),
           array_agg(EXISTS (SELECT 1 FROM waitlist w WHERE w.flight_id = fi.flight_id
               AND w.fare_class = fi.fare_class AND w.status = 'WAITING'))
    INTO v_departure, c_class, c_price, c_currency, c_rule, c_queued
    FROM flight f LEFT JOIN fare_inventory fi ON fi.flight_id = f.id AND fi.fare_class = ANY (p_classes)
    WHERE f.id = p_flight
    GROUP BY f.departure_at;
    IF NOT FOUND THEN
        RETURN QUERY SELECT g.i, 'no_flight'::text, NULL::text, NULL::booking
            FROM generate_series(1, n) AS g(i) ORDER BY g.i;
        RETURN;
    END IF;
    v_expires := least(p_now + p_ttl, v_departure);

    -- A flight without any of the classes: no fare at all.
    c_class := array_remove(c_class, NULL);

    -- The keys whose requests still hold them, locked against a retry
    -- taking one over before the commit.
    IF v_keyed > 0 THEN
        SELECT array_agg(k.ord) INTO v_keys_ok FROM (
            SELECT u.ord FROM unnest(p_key_callers, p_keys, p_leases) WITH ORDINALITY AS u(caller, idem, lease, ord)
            JOIN idempotency_key ik ON ik.caller_id = u.caller AND ik.idem_key = u.idem AND ik.lease = u.lease
                AND ik.response_status IS NULL
            ORDER BY ik.caller_id, ik.idem_key FOR UPDATE OF ik) AS k;
    END IF;

    IF v_seated THEN
        -- The three arrays come from one aggregation of the same rows, so
        -- they pair up; their order is not used (seats are found by
        -- array_position), so the aggregates sort nothing.
        SELECT array_agg(s.seat_no), array_agg(s.fare_class),
               array_agg(s.status = 'AVAILABLE' OR (s.status = 'HELD' AND s.held_until <= p_now))
        INTO s_no, s_class, s_free
        FROM (SELECT st.seat_no, st.fare_class, st.status, st.held_until FROM seat st
              WHERE st.flight_id = p_flight
                AND st.seat_no = ANY (string_to_array(array_to_string(p_seats, ','), ','))
              ORDER BY st.seat_no FOR UPDATE) AS s;
    END IF;
    s_claimed := array_fill(false, ARRAY[coalesce(cardinality(s_no), 0)]);

    -- The buckets as last committed; locked first only when asked (the
    -- statement after the lock sees what the lock waited for).
    IF p_lock_first THEN
        PERFORM FROM fare_bucket x WHERE x.flight_id = p_flight AND x.fare_class = ANY (p_classes)
            ORDER BY x.fare_class, x.bucket FOR UPDATE;
    END IF;
    -- In class and bucket order: the aggregates take the rows as the
    -- subquery sorted them (one sort, not one per aggregate).
    SELECT array_agg(fb.fare_class), array_agg(fb.bucket), array_agg(fb.quota), array_agg(fb.sold + fb.held),
           array_agg(fb.held)
    INTO b_class, b_n, b_quota, b_used, b_held
    FROM (SELECT x.fare_class, x.bucket, x.quota, x.sold, x.held FROM fare_bucket x
          WHERE x.flight_id = p_flight AND x.fare_class = ANY (p_classes)
          ORDER BY x.fare_class, x.bucket) AS fb;

    FOR i IN 1 .. n LOOP
        ci := array_position(c_class, p_classes[i]);
        IF ci IS NULL THEN
            v_code[i] := 'no_class';
            CONTINUE;
        END IF;
        IF v_departure <= p_now THEN
            v_code[i] := 'departed';
            CONTINUE;
        END IF;
        IF c_queued[ci] THEN
            v_code[i] := 'queued';
            CONTINUE;
        END IF;

        rs := string_to_array(p_seats[i], ',');
        units := coalesce(cardinality(rs), p_units[i]);
        -- Every seat exists and is of the class; then every one is free
        -- and not taken by an earlier request of the batch.
        FOREACH seat IN ARRAY coalesce(rs, '{}') LOOP
            si := array_position(s_no, seat);
            IF si IS NULL THEN
                v_code[i] := 'no_seat';
                v_detail[i] := seat;
                EXIT;
            ELSIF s_class[si] <> p_classes[i] THEN
                v_code[i] := 'seat_class';
                v_detail[i] := seat || ' ' || s_class[si];
                EXIT;
            END IF;
        END LOOP;
        IF v_code[i] IS NOT NULL THEN
            CONTINUE;
        END IF;
        FOREACH seat IN ARRAY coalesce(rs, '{}') LOOP
            si := array_position(s_no, seat);
            IF NOT s_free[si] OR s_claimed[si] THEN
                v_code[i] := 'seats_taken';
                EXIT;
            END IF;
        END LOOP;
        IF v_code[i] IS NOT NULL THEN
            CONTINUE;
        END IF;

        -- The class's room, placed by fare_allocate; a class of one
        -- bucket (the usual case) places its units in it without the call,
        -- as fare_allocate would: no share to move.
        t := array_position(b_class, p_classes[i]);
        IF t IS NOT NULL AND array_position(b_class, p_classes[i], t + 1) IS NULL THEN
            IF b_quota[t] - b_used[t] < units THEN
                t := NULL;
            END IF;
            v_quota := b_quota;
        ELSE
            SELECT a.o_target, a.o_quota INTO t, v_quota
            FROM fare_allocate(b_class, b_quota, b_used, p_classes[i], units) AS a;
        END IF;
        IF t IS NULL THEN
            v_code[i] := 'sold_out';
            v_detail[i] := units::text;
            CONTINUE;
        END IF;
        IF p_key_callers[i] IS NOT NULL AND NOT (i = ANY (coalesce(v_keys_ok, '{}'))) THEN
            v_code[i] := 'key_in_use';
            CONTINUE;
        END IF;
        v_moved := v_moved OR v_quota IS DISTINCT FROM b_quota;
        b_quota := v_quota;
        b_used[t] := b_used[t] + units;
        b_held[t] := b_held[t] + units;
        FOREACH seat IN ARRAY coalesce(rs, '{}') LOOP
            s_claimed[array_position(s_no, seat)] := true;
        END LOOP;
        v_bucket[i] := b_n[t];
        v_seat_total := v_seat_total + coalesce(cardinality(rs), 0);
        v_unit_total := v_unit_total + units;
        IF p_key_callers[i] IS NOT NULL THEN
            v_key_total := v_key_total + 1;
        END IF;
        IF v_one_class IS NULL THEN
            v_one_class := p_classes[i];
            v_one_bucket := b_n[t];
        ELSIF v_one_class <> p_classes[i] OR v_one_bucket <> b_n[t] THEN
            v_many := true;
        END IF;
        pl_i := pl_i || i;
        pl_ci := pl_ci || ci;
        pl_units := pl_units || units;
    END LOOP;

    IF cardinality(pl_i) = 1 THEN
        -- One booking (the everyday hold): inserted as it is, nothing to
        -- pair up.
        i := pl_i[1];
        ci := pl_ci[1];
        INSERT INTO booking (kind, status, customer_id, amount, currency, hold_expires_at, starts_at,
            refund_rule, flight_id, fare_class, seats, quantity, fare_bucket, created_at, updated_at)
        VALUES ('flight', 'HELD', p_customers[i], c_price[ci] * pl_units[1], c_currency[ci], v_expires,
            v_departure, c_rule[ci], p_flight, p_classes[i], string_to_array(p_seats[i], ','), pl_units[1],
            v_bucket[i], p_now, p_now)
        RETURNING * INTO v_one;
        v_id[i] := v_one.id;
        v_row[i] := v_one;
    ELSIF cardinality(pl_i) > 1 THEN
        -- The bookings, in request order: identity values are drawn in
        -- insertion order, which follows the ORDER BY, so the ids sorted
        -- pair with the requests sorted (checked, not trusted).
        WITH ins AS (
            INSERT INTO booking (kind, status, customer_id, amount, currency, hold_expires_at, starts_at,
                refund_rule, flight_id, fare_class, seats, quantity, fare_bucket, created_at, updated_at)
            SELECT 'flight', 'HELD', p_customers[u.i], c_price[u.ci] * u.units, c_currency[u.ci], v_expires,
                v_departure, c_rule[u.ci], p_flight, p_classes[u.i], string_to_array(p_seats[u.i], ','), u.units,
                v_bucket[u.i], p_now, p_now
            FROM unnest(pl_i, pl_ci, pl_units) AS u(i, ci, units)
            ORDER BY u.i
            RETURNING *)
        SELECT array_agg(ins.id ORDER BY ins.id), array_agg(ins::booking ORDER BY ins.id),
               array_agg(ins.customer_id || ' ' || ins.fare_class || ' ' || ins.quantity ORDER BY ins.id)
        INTO v_new, v_rows, v_check FROM ins;
        SELECT array_agg(p_customers[u.i] || ' ' || p_classes[u.i] || ' ' || u.units ORDER BY u.i)
        INTO v_want FROM unnest(pl_i, pl_units) AS u(i, units);
        IF v_check IS DISTINCT FROM v_want THEN
            RAISE EXCEPTION 'hold_flight: bookings returned out of order';
        END IF;
        FOR j IN 1 .. cardinality(pl_i) LOOP
            v_id[pl_i[j]] := v_new[j];
            v_row[pl_i[j]] := v_rows[j];
        END LOOP;
    END IF;

    IF cardinality(pl_i) > 0 THEN
        -- seat_no = ANY lets the planner fetch just these seats by the
        -- primary key.
        IF v_seated THEN
            WITH taken AS (
                SELECT v_id[u.i] AS booking_id, x AS seat_no
                FROM unnest(pl_i) AS u(i), unnest(string_to_array(p_seats[u.i], ',')) AS x)
            UPDATE seat s SET status = 'HELD', booking_id = tk.booking_id, held_until = v_expires
            FROM taken tk
            WHERE s.flight_id = p_flight AND s.seat_no = ANY (s_no) AND s.seat_no = tk.seat_no
              AND (s.status = 'AVAILABLE' OR (s.status = 'HELD' AND s.held_until <= p_now));
            GET DIAGNOSTICS cnt = ROW_COUNT;
            IF cnt <> v_seat_total THEN
                RAISE EXCEPTION 'hold_flight: only % seats of flight % were free', cnt, p_flight;
            END IF;
        END IF;

        IF cardinality(pl_i) = 1 THEN
            INSERT INTO outbox (booking_id, type, payload, created_at)
            VALUES (v_one.id, 'booking.held', flight_booking_view(v_one), p_now);
        ELSE
            INSERT INTO outbox (booking_id, type, payload, created_at)
            SELECT b.id, 'booking.held', flight_booking_view(b), p_now
            FROM unnest(v_rows) AS b ORDER BY b.id;
        END IF;

        IF v_keyed > 0 THEN
            UPDATE idempotency_key ik SET effect = 'booking:' || v_id[u.ord]
            FROM unnest(p_key_callers, p_keys, p_leases) WITH ORDINALITY AS u(caller, idem, lease, ord)
            WHERE v_id[u.ord] IS NOT NULL
              AND ik.caller_id = u.caller AND ik.idem_key = u.idem AND ik.lease = u.lease AND ik.response_status IS NULL;
            GET DIAGNOSTICS cnt = ROW_COUNT;
            IF cnt <> v_key_total THEN
                RAISE EXCEPTION 'hold_flight: % idempotency keys recorded', cnt;
            END IF;
        END IF;

        -- Now the buckets. When every request went to one bucket (a lone
        -- hold, or a batch of a class of one bucket) and no share moved,
        -- one conditional update locks it and applies the units if they
        -- still fit it as it is now: what the general step below would do
        -- then, without reading the buckets again.
        IF NOT v_moved AND NOT v_many THEN
            UPDATE fare_bucket fb SET held = fb.held + v_unit_total
            WHERE fb.flight_id = p_flight AND fb.fare_class = v_one_class AND fb.bucket = v_one_bucket
              AND fb.sold + fb.held + v_unit_total <= fb.quota;
            v_applied := FOUND;
        END IF;

        IF NOT v_applied THEN
            -- Else the buckets, locked as they are: each request's units go to
            -- the bucket decided above, with share moved into it from the
            -- others (bucket order) when it lacks room; a request the class
            -- has no room for any more sends the caller back (BH001).
            SELECT array_agg(fb.fare_class ORDER BY fb.fare_class, fb.bucket), array_agg(fb.bucket ORDER BY fb.fare_class, fb.bucket),
                   array_agg(fb.quota ORDER BY fb.fare_class, fb.bucket), array_agg(fb.sold + fb.held ORDER BY fb.fare_class, fb.bucket),
                   array_agg(fb.held ORDER BY fb.fare_class, fb.bucket)
            INTO b_class, b_n, b_quota, b_used, b_held
            FROM (SELECT * FROM fare_bucket x WHERE x.flight_id = p_flight AND x.fare_class = ANY (p_classes)
                  ORDER BY x.fare_class, x.bucket FOR UPDATE) AS fb;
            b_quota0 := b_quota;
            b_held0 := b_held;
            v_moved := false;
            FOR pk IN 1 .. cardinality(pl_i) LOOP
                i := pl_i[pk];
                units := pl_units[pk];
                SELECT a.o_target, a.o_quota INTO t, v_quota
                FROM fare_allocate(b_class, b_quota, b_used, p_classes[i], units, b_n, v_bucket[i]) AS a;
                IF t IS NULL THEN
                    RAISE EXCEPTION 'hold_flight: the fare buckets of flight % changed; lock them first', p_flight
                        USING ERRCODE = 'BH001';
                END IF;
                v_moved := v_moved OR v_quota IS DISTINCT FROM b_quota;
                b_quota := v_quota;
                b_used[t] := b_used[t] + units;
                b_held[t] := b_held[t] + units;
            END LOOP;

            -- Buckets whose share moved are written whole (the deferred
            -- trigger checks the shares still add up); the others only held.
            IF v_moved THEN
                UPDATE fare_bucket fb SET quota = u.quota, held = u.held
                FROM unnest(b_class, b_n, b_quota, b_held, b_quota0) AS u(fare_class, bucket, quota, held, quota0)
                WHERE fb.flight_id = p_flight AND fb.fare_class = u.fare_class AND fb.bucket = u.bucket
                  AND u.quota <> u.quota0;
            END IF;
            UPDATE fare_bucket fb SET held = u.held
            FROM unnest(b_class, b_n, b_quota, b_held, b_quota0, b_held0) AS u(fare_class, bucket, quota, held, quota0, held0)
            WHERE fb.flight_id = p_flight AND fb.fare_class = u.fare_class AND fb.bucket = u.bucket
              AND u.quota = u.quota0 AND u.held <> u.held0;
        END IF;
    END IF;

    FOR i IN 1 .. n LOOP
        o_ord := i;
        o_code := v_code[i];
        o_detail := v_detail[i];
        o_booking := v_row[i];
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd

DROP FUNCTION hold_allowance(bigint[], timestamptz, integer, interval);
