-- A process that runs relays itself wakes them when its own transactions
-- that wrote events commit, without a notification: every NOTIFY costs each
-- listening session a transaction to read it, one per committed change. Its
-- sessions say so with berth.wake_local = on; every other writer (a serve
-- whose events run in `berth worker`, other tools) still notifies.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('berth.wake_local', true), '') <> 'on' THEN
        PERFORM pg_notify('berth_outbox', '');
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('berth_outbox', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd
