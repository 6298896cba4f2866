-- A customer's holds are decided one after the other whether or not a hold
-- limit is set. The waitlist relies on it: a customer who holds units of a
-- class may not join its line, and a join takes the lock each hold of the
-- customer takes (hold_allowance's) before it reads the customer's holds.
-- With BERTH_HOLD_LIMIT off the holds took no lock, so a hold and a join
-- sent at once could both pass. A hold without a limit now calls
-- hold_allowance with a window of zero: it takes the locks and reads
-- nothing, and every customer has p_limit holds left.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION hold_allowance(p_customers bigint[], p_now timestamptz, p_limit integer, p_window interval)
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
    IF p_window <= interval '0' THEN
        -- No limit: the locks only.
        RETURN QUERY SELECT DISTINCT c, p_limit, interval '0' FROM unnest(p_customers) AS c;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT d.c, p_limit - count(r.created_at)::integer, coalesce(min(r.created_at), p_now) + p_window - p_now
    FROM (SELECT DISTINCT c FROM unnest(p_customers) AS c) AS d
    LEFT JOIN LATERAL (SELECT b.created_at FROM booking b WHERE b.customer_id = d.c
                       ORDER BY b.id DESC LIMIT p_limit) AS r ON r.created_at > p_now - p_window
    GROUP BY d.c;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION hold_allowance(p_customers bigint[], p_now timestamptz, p_limit integer, p_window interval)
    RETURNS TABLE (o_customer bigint, o_left integer, o_retry interval)
    LANGUAGE plpgsql
    AS $$
DECLARE
    k integer;
BEGIN
    FOR k IN SELECT DISTINCT hashint8(c) FROM unnest(p_customers) AS c ORDER BY 1 LOOP
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
