-- hold_flight's lone-bucket step could deadlock with another hold of the
-- same class.
--
-- When every request of a call went to one bucket, hold_flight applies the
-- units with one conditional UPDATE of that bucket ("only if they still
-- fit"). If another transaction had the row locked, PostgreSQL waits for
-- it, locks the row's newest version and only then checks the condition
-- again: when the units no longer fit, the UPDATE changes nothing but the
-- row stays locked until the end of the transaction. hold_flight then went
-- on to lock all the class's buckets in bucket order, while already holding
-- one of them out of that order; a second hold, locking in order, held a
-- lower bucket and waited for this one: a deadlock, which PostgreSQL broke
-- by failing one of them (seen as "deadlock detected" when sixty holds race
-- for the last units of a class of four buckets).
--
-- Now, when that UPDATE applies nothing, the call raises BH001 ("the
-- buckets moved; lock them first") unless it already locked every bucket
-- first: the transaction ends, its lock with it, and the caller makes the
-- call again with p_lock_first, which takes every bucket in order before
-- anything else. A transaction thus holds either the one bucket its UPDATE
-- applied to, as its last bucket lock, or the buckets taken in order from
-- none: no two can wait on each other for buckets.
--
-- The function's text is changed in place (the rest of it, defined by
-- 00023_hold_limit.sql, stays as it is); the change must apply exactly
-- once, or the migration fails.

-- +goose Up

-- +goose StatementBegin
DO $do$
DECLARE
    v_def  text := pg_get_functiondef('hold_flight(bigint, timestamptz, interval, bigint[], text[], text[], integer[], bigint[], text[], uuid[], boolean, integer, interval)'::regprocedure);
    v_old  text := E'            v_applied := FOUND;\n        END IF;\n';
    v_new  text := E'            v_applied := FOUND;\n'
        || E'            -- Not applied: the row may be locked all the same (PostgreSQL\n'
        || E'            -- locks the newest version before it checks the condition\n'
        || E'            -- again), out of bucket order. Start again, locking first.\n'
        || E'            IF NOT v_applied AND NOT p_lock_first THEN\n'
        || E'                RAISE EXCEPTION ''hold_flight: the fare bucket of flight % filled meanwhile; lock them first'', p_flight\n'
        || E'                    USING ERRCODE = ''BH001'';\n'
        || E'            END IF;\n'
        || E'        END IF;\n';
BEGIN
    IF (length(v_def) - length(replace(v_def, v_old, ''))) / length(v_old) <> 1 THEN
        RAISE EXCEPTION 'hold_flight is not the function 00023_hold_limit.sql defined';
    END IF;
    EXECUTE replace(v_def, v_old, v_new);
END
$do$;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
DO $do$
DECLARE
    v_def  text := pg_get_functiondef('hold_flight(bigint, timestamptz, interval, bigint[], text[], text[], integer[], bigint[], text[], uuid[], boolean, integer, interval)'::regprocedure);
    -- The lines Up added run from v_first to v_last, included.
    v_first text := E'            -- Not applied: the row may be locked all the same';
    v_last  text := E'                    USING ERRCODE = ''BH001'';\n            END IF;\n';
    v_from  integer := strpos(v_def, v_first);
    v_to    integer := strpos(v_def, v_last);
BEGIN
    IF v_from = 0 OR v_to = 0 THEN
        RAISE EXCEPTION 'hold_flight is not the function 00025_bucket_lock_order.sql defined';
    END IF;
    EXECUTE left(v_def, v_from - 1) || substr(v_def, v_to + length(v_last));
END
$do$;
-- +goose StatementEnd
