-- A batch of car holds is decided and written by one database function,
-- hold_car, sent as one statement: one round trip and one commit, instead
-- of a transaction of five round trips (BEGIN, the limits with the car's
-- lock and calendar, the inserts, the events and keys, COMMIT) during
-- which the car's row stayed locked.
--
-- Its booking.held and booking.expired events carry the booking as the API
-- shows it. booking_view renders both kinds of booking, a car's times in
-- the offset its client wrote them with (booking.utc_offset), as Go's
-- booking.View does; flight_booking_view becomes a name for it.

-- +goose Up

-- +goose StatementBegin
-- json_time_at renders t as Go's encoding/json renders a time.Time in a
-- zone p_offset seconds east of UTC: RFC 3339, the fraction of a second
-- without trailing zeros, "Z" for UTC, else ±hh:mm.
CREATE FUNCTION json_time_at(t timestamptz, p_offset integer) RETURNS text
    LANGUAGE sql STABLE
    RETURN to_char((t AT TIME ZONE 'UTC') + make_interval(secs => p_offset), 'YYYY-MM-DD"T"HH24:MI:SS')
        || coalesce('.' || nullif(rtrim(to_char((t AT TIME ZONE 'UTC') + make_interval(secs => p_offset), 'US'), '0'), ''), '')
        || CASE WHEN p_offset = 0 THEN 'Z'
                ELSE CASE WHEN p_offset < 0 THEN '-' ELSE '+' END
                     || lpad((abs(p_offset) / 3600)::text, 2, '0') || ':' || lpad((abs(p_offset) % 3600 / 60)::text, 2, '0')
           END;
-- +goose StatementEnd

-- +goose StatementBegin
-- booking_view is a booking as the API shows it (Go's booking.View), for
-- the events the database writes itself.
CREATE FUNCTION booking_view(b booking) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN jsonb_strip_nulls(jsonb_build_object(
        'bookingId', b.id, 'kind', b.kind, 'status', b.status, 'customerId', b.customer_id,
        'amount', b.amount, 'currency', b.currency,
        'holdExpiresAt', CASE WHEN b.status = 'HELD' THEN json_time_at(b.hold_expires_at, coalesce(b.utc_offset, 0)) END,
        'flightId', b.flight_id, 'fareClass', b.fare_class,
        'seats', CASE WHEN cardinality(b.seats) > 0 THEN to_jsonb(b.seats) END,
        'quantity', nullif(b.quantity, 0),
        'paymentUrl', CASE WHEN b.status = 'HELD' THEN '/bookings/' || b.id || '/payments' END,
        'refundAmount', b.refund_amount, 'refundStatus', nullif(b.refund_status, ''),
        'cancelReason', nullif(b.cancel_reason, ''),
        'carId', b.car_id,
        'from', CASE WHEN b.kind = 'car' THEN json_time_at(lower(b.period), coalesce(b.utc_offset, 0)) END,
        'to', CASE WHEN b.kind = 'car' THEN json_time_at(upper(b.period), coalesce(b.utc_offset, 0)) END,
        'deposit', CASE WHEN b.kind = 'car' THEN b.amount END,
        'rentalPrice', CASE WHEN b.kind = 'car' THEN b.rental_price END,
        'version', b.version,
        'createdAt', json_time_at(b.created_at, coalesce(b.utc_offset, 0)),
        'updatedAt', json_time_at(b.updated_at, coalesce(b.utc_offset, 0))));
-- +goose StatementEnd

CREATE OR REPLACE FUNCTION flight_booking_view(b booking) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN booking_view(b);

-- +goose StatementBegin
-- hold_car holds the requests p_customers[i] for [p_froms[i], p_tos[i])
-- (written with UTC offset p_offsets[i], p_days[i] days to pay) of car p_car
-- at p_now, each for p_ttl but never past its pickup, with refund rule
-- p_rule. Each request is decided in order, all or nothing, against the
-- car's calendar and the requests before it. A request made under an
-- Idempotency-Key has p_key_callers[i], p_keys[i] and p_leases[i] (else
-- NULL): its effect ("booking:<id>") is recorded with the booking, and a
-- key a retry took over refuses the request. With p_limit above zero, a
-- customer may make at most p_limit holds per p_window (hold_allowance
-- decides, counting the holds of this batch too; a request refused for
-- another reason does not count).
--
-- Lock order, as every car hold's: the customers' hold-limit locks
-- (hold_allowance, always first), the car's row (FOR NO KEY UPDATE, which
-- every hold of the car takes), the keys in key order, then the stale
-- holds it expires, in id order.
--
-- The exclusion constraint booking_car_no_overlap decides whether the car
-- is free. The calendar is read only to leave out, before inserting, the
-- requests the constraint would refuse for certain (a live booking, or an
-- earlier request of the batch, blocks time the request would block, its
-- turnaround included): one refused insert would abort the whole batch.
-- The read is made under the car's lock, so a request found free is free
-- unless a writer that does not take the lock got there first; the insert
-- then raises, and nothing of the batch is written. A stale hold (HELD, its
-- time up) in the way of a request it holds is expired here, with its
-- booking.expired event, so that it never blocks the car until the
-- sweeper comes (a car booking gives its period back by leaving the live
-- statuses: nothing else to release, unlike a flight's seats).
--
-- It returns, ordered by o_ord: first a row with o_ord 0 and o_code
-- 'expired' for each stale hold it expired (the caller tells the rest of
-- the process once committed), then one row per request: o_code NULL and
-- the booking made, or an error code and its detail (Go words the error):
--   no_car, car_unavailable, key_in_use, hold_limit (detail: seconds
--   until the customer may hold again).
CREATE FUNCTION hold_car(p_car bigint, p_now timestamptz, p_ttl interval,
    p_customers bigint[], p_froms timestamptz[], p_tos timestamptz[], p_offsets integer[], p_days bigint[],
    p_rule jsonb, p_key_callers bigint[], p_keys text[], p_leases uuid[], p_limit integer, p_window interval)
    RETURNS TABLE (o_ord integer, o_code text, o_detail text, o_booking booking)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    n            integer := coalesce(cardinality(p_customers), 0);
    v_keyed      integer := coalesce(cardinality(array_remove(p_key_callers, NULL)), 0);
    v_key_total  integer := 0;
    v_keys_ok    bigint[];
    v_code       text[] := array_fill(NULL::text, ARRAY[n]);
    v_detail     text[] := array_fill(NULL::text, ARRAY[n]);
    v_row        booking[] := array_fill(NULL::booking, ARRAY[n]);
    v_host       bigint;
    v_deposit    bigint;
    v_daily      bigint;
    v_currency   text;
    v_turnaround interval;
    h_customer   bigint[];
    h_left       integer[];
    h_retry      interval[];
    -- the calendar: live and stale bookings in the batch's span (t_id
    -- NULL for a request of the batch), t_until NULL for a booking that
    -- does not run out
    t_id         bigint[];
    t_from       timestamptz[];
    t_to         timestamptz[];
    t_until      timestamptz[];
    v_stale      bigint[] := '{}';
    pl_i         integer[] := '{}';
    v_rows       booking[];
    v_x          booking;
    v_id         bigint;
    v_start      timestamptz;
    v_end        timestamptz;
    v_blocked    boolean;
    hi           integer;
    i            integer;
    j            integer;
    cnt          integer;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    IF p_limit > 0 THEN
        SELECT array_agg(a.o_customer), array_agg(a.o_left), array_agg(a.o_retry)
        INTO h_customer, h_left, h_retry
        FROM hold_allowance(p_customers, p_now, p_limit, p_window) AS a;
    END IF;

    SELECT c.host_id, c.daily_price, c.deposit, c.currency, c.turnaround
    INTO v_host, v_daily, v_deposit, v_currency, v_turnaround
    FROM car c WHERE c.id = p_car FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT g.i, 'no_car'::text, NULL::text, NULL::booking
            FROM generate_series(1, n) AS g(i) ORDER BY g.i;
        RETURN;
    END IF;

    -- The keys whose requests still hold them, locked against a retry
    -- taking one over before the commit.
    IF v_keyed > 0 THEN
        SELECT array_agg(k.ord) INTO v_keys_ok FROM (
            SELECT u.ord FROM unnest(p_key_callers, p_keys, p_leases) WITH ORDINALITY AS u(caller, idem, lease, ord)
            JOIN idempotency_key ik ON ik.caller_id = u.caller AND ik.idem_key = u.idem AND ik.lease = u.lease
                AND ik.response_status IS NULL
            ORDER BY ik.caller_id, ik.idem_key FOR UPDATE OF ik) AS k;
    END IF;

    SELECT array_agg(b.id ORDER BY b.id), array_agg(lower(b.blocked) ORDER BY b.id),
           array_agg(upper(b.blocked) ORDER BY b.id),
           array_agg(CASE WHEN b.status = 'HELD' THEN b.hold_expires_at END ORDER BY b.id)
    INTO t_id, t_from, t_to, t_until
    FROM booking b
    WHERE b.kind = 'car' AND b.car_id = p_car AND b.status IN ('HELD', 'CONFIRMED', 'ON_TRIP')
      AND b.blocked && tstzrange((SELECT min(f) FROM unnest(p_froms) AS f),
                                 (SELECT max(t) FROM unnest(p_tos) AS t) + v_turnaround, '[)');
    t_id := coalesce(t_id, '{}');

    FOR i IN 1 .. n LOOP
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
        END IF;
        v_start := p_froms[i];
        v_end := p_tos[i] + v_turnaround;
        v_blocked := false;
        FOR j IN 1 .. cardinality(t_id) LOOP
            IF t_from[j] < v_end AND v_start < t_to[j] AND (t_until[j] IS NULL OR p_now < t_until[j]) THEN
                v_blocked := true;
                EXIT;
            END IF;
        END LOOP;
        IF v_blocked THEN
            v_code[i] := 'car_unavailable';
            CONTINUE;
        END IF;
        FOR j IN 1 .. cardinality(t_id) LOOP
            IF t_id[j] IS NOT NULL AND t_from[j] < v_end AND v_start < t_to[j] AND NOT (t_id[j] = ANY (v_stale)) THEN
                v_stale := v_stale || t_id[j];
            END IF;
        END LOOP;
        IF h_customer IS NOT NULL THEN
            h_left[hi] := h_left[hi] - 1;
        END IF;
        IF p_key_callers[i] IS NOT NULL THEN
            v_key_total := v_key_total + 1;
        END IF;
        pl_i := pl_i || i;
        -- Later requests of the batch find this one's time taken.
        t_id := t_id || NULL::bigint;
        t_from := t_from || v_start;
        t_to := t_to || v_end;
        t_until := t_until || NULL::timestamptz;
    END LOOP;

    FOREACH v_id IN ARRAY (SELECT coalesce(array_agg(s ORDER BY s), '{}') FROM unnest(v_stale) AS s) LOOP
        UPDATE booking SET status = 'EXPIRED', version = version + 1, updated_at = p_now
        WHERE id = v_id AND status = 'HELD' AND hold_expires_at <= p_now
        RETURNING * INTO v_x;
        IF FOUND THEN
            INSERT INTO outbox (booking_id, type, payload, created_at)
            VALUES (v_x.id, 'booking.expired', booking_view(v_x), p_now);
            o_ord := 0;
            o_code := 'expired';
            o_detail := NULL;
            o_booking := v_x;
            RETURN NEXT;
        END IF;
    END LOOP;

    IF cardinality(pl_i) > 0 THEN
        -- The bookings, in request order: identity values are drawn in
        -- insertion order, which follows the ORDER BY, so the rows sorted
        -- by id pair with the requests held (checked, not trusted).
        WITH ins AS (
            INSERT INTO booking (kind, status, customer_id, host_id, amount, currency, hold_expires_at,
                starts_at, refund_rule, car_id, period, rental_price, utc_offset, created_at, updated_at)
            SELECT 'car', 'HELD', p_customers[u.i], v_host, v_deposit, v_currency,
                least(p_now + p_ttl, p_froms[u.i]), p_froms[u.i], p_rule, p_car,
                tstzrange(p_froms[u.i], p_tos[u.i], '[)'), v_daily * p_days[u.i], p_offsets[u.i], p_now, p_now
            FROM unnest(pl_i) AS u(i)
            ORDER BY u.i
            RETURNING *)
        SELECT array_agg(ins ORDER BY ins.id) INTO v_rows FROM ins;
        FOR j IN 1 .. cardinality(pl_i) LOOP
            i := pl_i[j];
            IF (v_rows[j]).customer_id <> p_customers[i] OR lower((v_rows[j]).period) <> p_froms[i] THEN
                RAISE EXCEPTION 'hold_car: bookings returned out of order';
            END IF;
            v_row[i] := v_rows[j];
        END LOOP;

        INSERT INTO outbox (booking_id, type, payload, created_at)
        SELECT b.id, 'booking.held', booking_view(b), p_now
        FROM unnest(v_rows) AS b ORDER BY b.id;

        IF v_key_total > 0 THEN
            UPDATE idempotency_key ik SET effect = 'booking:' || (v_row[u.ord]).id
            FROM unnest(p_key_callers, p_keys, p_leases) WITH ORDINALITY AS u(caller, idem, lease, ord)
            WHERE (v_row[u.ord]).id IS NOT NULL
              AND ik.caller_id = u.caller AND ik.idem_key = u.idem AND ik.lease = u.lease AND ik.response_status IS NULL;
            GET DIAGNOSTICS cnt = ROW_COUNT;
            IF cnt <> v_key_total THEN
                RAISE EXCEPTION 'hold_car: % idempotency keys recorded', cnt;
            END IF;
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
DROP FUNCTION hold_car(bigint, timestamptz, interval, bigint[], timestamptz[], timestamptz[], integer[], bigint[],
    jsonb, bigint[], text[], uuid[], integer, interval);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION flight_booking_view(b booking) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN jsonb_strip_nulls(jsonb_build_object('bookingId', b.id, 'kind', b.kind, 'status', b.status,
        'customerId', b.customer_id, 'amount', b.amount, 'currency', b.currency,
        'holdExpiresAt', CASE WHEN b.status = 'HELD' THEN json_time(b.hold_expires_at) END,
        'flightId', b.flight_id, 'fareClass', b.fare_class,
        'seats', CASE WHEN cardinality(b.seats) > 0 THEN to_jsonb(b.seats) END,
        'quantity', nullif(b.quantity, 0),
        'paymentUrl', CASE WHEN b.status = 'HELD' THEN '/bookings/' || b.id || '/payments' END,
        'refundAmount', b.refund_amount, 'refundStatus', nullif(b.refund_status, ''),
        'cancelReason', nullif(b.cancel_reason, ''), 'version', b.version,
        'createdAt', json_time(b.created_at), 'updatedAt', json_time(b.updated_at)));
-- +goose StatementEnd
DROP FUNCTION booking_view(booking);
DROP FUNCTION json_time_at(timestamptz, integer);
