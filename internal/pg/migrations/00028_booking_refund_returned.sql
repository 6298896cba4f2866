-- A booking's refund fields say the same thing (docs/api.md, "Bookings"):
-- refundAmount is all the money owed back to the customer in the
-- booking's currency, whose progress refundStatus shows. It counted only a
-- cancellation's refund (refund_amount), so a booking cancelled before its
-- late money arrived, or one paid for under another transaction, showed
-- refundStatus SUCCEEDED beside refundAmount 0, or none. refund_returned
-- is the money that arrived for the booking but did not confirm it, as
-- the webhook records it for refund (payment.outcome = 'refund'), in the
-- booking's currency; refund_amount keeps meaning the cancellation's
-- refund, which the audit (I5) counts as such. booking_view, the booking
-- as the events the database writes itself show it, shows their sum as
-- Go's booking.View does.

-- +goose Up
-- booking is the table every hold writes: the lock this takes is given up
-- after 3 s rather than queued behind a long transaction with every hold
-- queued behind it (the migration then fails, and is run again).
SET LOCAL lock_timeout = '3s';

-- The two views' bodies (SQL-standard) depend on booking's row type,
-- which a new column changes: they are dropped and made again around it.
-- The hold functions call them by name (plpgsql), and find them again.
DROP FUNCTION flight_booking_view(booking);
DROP FUNCTION booking_view(booking);

-- A constant default: no rewrite of the table. The check is NOT VALID, so
-- adding it reads no row: every row has the default, and the backfill
-- below adds sums of positive amounts; rows written from now on are checked.
ALTER TABLE booking ADD COLUMN refund_returned bigint NOT NULL DEFAULT 0;
ALTER TABLE booking ADD CONSTRAINT booking_refund_returned_check CHECK (refund_returned >= 0) NOT VALID;

UPDATE booking b SET refund_returned = p.total
FROM (SELECT p.booking_id, p.currency, sum(p.amount) AS total FROM payment p
      WHERE p.outcome = 'refund' AND p.amount > 0 GROUP BY p.booking_id, p.currency) p
WHERE p.booking_id = b.id AND p.currency = b.currency;

-- +goose StatementBegin
CREATE FUNCTION booking_view(b booking) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN jsonb_strip_nulls(jsonb_build_object(
        'bookingId', b.id, 'kind', b.kind, 'status', b.status, 'customerId', b.customer_id,
        'amount', b.amount, 'currency', b.currency,
        'holdExpiresAt', CASE WHEN b.status = 'HELD' THEN json_time_at(b.hold_expires_at, coalesce(b.utc_offset, 0)) END,
        'extendedAt', CASE WHEN b.extended_at IS NOT NULL THEN json_time_at(b.extended_at, coalesce(b.utc_offset, 0)) END,
        'flightId', b.flight_id, 'fareClass', b.fare_class,
        'seats', CASE WHEN cardinality(b.seats) > 0 THEN to_jsonb(b.seats) END,
        'quantity', nullif(b.quantity, 0),
        'paymentUrl', CASE WHEN b.status = 'HELD' THEN '/bookings/' || b.id || '/payments' END,
        'refundAmount', CASE WHEN b.refund_amount IS NOT NULL OR b.refund_returned > 0
            THEN coalesce(b.refund_amount, 0) + b.refund_returned END,
        'refundStatus', nullif(b.refund_status, ''),
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

CREATE FUNCTION flight_booking_view(b booking) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN booking_view(b);

-- +goose Down
SET LOCAL lock_timeout = '3s';
DROP FUNCTION flight_booking_view(booking);
DROP FUNCTION booking_view(booking);

ALTER TABLE booking DROP COLUMN refund_returned;

-- +goose StatementBegin
CREATE FUNCTION booking_view(b booking) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN jsonb_strip_nulls(jsonb_build_object(
        'bookingId', b.id, 'kind', b.kind, 'status', b.status, 'customerId', b.customer_id,
        'amount', b.amount, 'currency', b.currency,
        'holdExpiresAt', CASE WHEN b.status = 'HELD' THEN json_time_at(b.hold_expires_at, coalesce(b.utc_offset, 0)) END,
        'extendedAt', CASE WHEN b.extended_at IS NOT NULL THEN json_time_at(b.extended_at, coalesce(b.utc_offset, 0)) END,
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

CREATE FUNCTION flight_booking_view(b booking) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN booking_view(b);
